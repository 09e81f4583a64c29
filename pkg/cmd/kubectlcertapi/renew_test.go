package kubectlcertapi

import (
	"strings"
	"testing"
)

func TestParseRenewArgs(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []renewTarget
		wantErr string
	}{
		{args: []string{"web"}, want: []renewTarget{{"team-a", "web"}}},
		{args: []string{"team-b/web", "api"}, want: []renewTarget{{"team-b", "web"}, {"team-a", "api"}}},
		{args: []string{"Web"}, wantErr: `"Web": the name "Web" is not valid`},
		{args: []string{"/web"}, wantErr: `the namespace "" is not valid`},
		{args: []string{"team-b/"}, wantErr: `the name "" is not valid`},
		{args: []string{"a/b/c"}, wantErr: `the name "b/c" is not valid`},
	} {
		got, err := parseRenewArgs(tc.args, "team-a")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "give NAME or NAMESPACE/NAME") {
				t.Errorf("%q: error %v, want one with %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("%q: %v, %v; want %v", tc.args, got, err, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: %v, want %v", tc.args, got, tc.want)
			}
		}
	}
}
