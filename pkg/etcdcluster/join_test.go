package etcdcluster

import (
	"slices"
	"testing"
)

func TestJoinCandidates(t *testing.T) {
	const self = "https://10.0.0.3:2379"
	voter := func(urls ...string) Entry { return Entry{Name: "v", ClientURLs: urls} }
	learner := func(urls ...string) Entry { return Entry{Name: "l", ClientURLs: urls, IsLearner: true} }
	cases := []struct {
		name       string
		answered   string
		members    []Entry
		discovered []string
		want       []string
	}{
		{
			name:     "the member that answered first, then the other voters, then the rest found",
			answered: "https://10.0.0.2:2379",
			members: []Entry{
				voter("https://certapi-0.peers:2379"),
				voter("https://certapi-1.peers:2379"),
				learner("https://certapi-4.peers:2379"),
			},
			discovered: []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379", self},
			want:       []string{"https://10.0.0.2:2379", "https://certapi-0.peers:2379", "https://certapi-1.peers:2379", "https://10.0.0.1:2379"},
		},
		{
			name:       "a voter not started yet has no client URL; learners and this member are never asked",
			answered:   "https://10.0.0.1:2379",
			members:    []Entry{{ID: 7}, learner("https://10.0.0.5:2379"), voter(self)},
			discovered: []string{"https://10.0.0.1:2379"},
			want:       []string{"https://10.0.0.1:2379"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := joinCandidates(tc.answered, tc.members, tc.discovered, self); !slices.Equal(got, tc.want) {
				t.Errorf("joinCandidates = %q, want %q", got, tc.want)
			}
		})
	}
}
