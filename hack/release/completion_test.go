package main

import (
	"strings"
	"testing"
)

// TestCompletionFiles: kubectl-certapi's archives for linux and darwin hold kubectl_complete-certapi,
// executable, which hands kubectl's words to the plugin's cobra completion; Windows archives and
// kubectl-create-servingcertrequest's (kubectl does not complete subcommands of `create`) hold none.
// test/e2e's TestKubectlCertapiRenew runs the same script through the real kubectl, and test/release
// checks the archives of a release.
func TestCompletionFiles(t *testing.T) {
	for _, tc := range []struct {
		bin, goos string
		want      string
	}{
		{"kubectl-certapi", "linux", "kubectl_complete-certapi"},
		{"kubectl-certapi", "darwin", "kubectl_complete-certapi"},
		{"kubectl-certapi", "windows", ""},
		{"kubectl-create-servingcertrequest", "linux", ""},
	} {
		files := completionFiles(tc.bin, tc.goos)
		if tc.want == "" {
			if len(files) != 0 {
				t.Errorf("%s for %s: %d completion files, want none", tc.bin, tc.goos, len(files))
			}
			continue
		}
		if len(files) != 1 || files[0].name != tc.want || files[0].mode != 0o755 {
			t.Fatalf("%s for %s: %+v, want one executable %s", tc.bin, tc.goos, files, tc.want)
		}
		script := string(files[0].data)
		if !strings.HasPrefix(script, "#!/bin/sh\n") || !strings.Contains(script, "\nexec kubectl-certapi __complete \"$@\"\n") {
			t.Errorf("%s:\n%s", tc.want, script)
		}
	}
}
