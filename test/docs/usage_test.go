package docs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// usageSamples are the Go blocks of docs/usage.md marked <!-- docs-check: NAME -->, each with the test
// file whose lines (comments and spacing aside) it must be, in order: code shown is code that runs.
var usageSamples = map[string]string{
	"operator-test-double": "test/integration/servingcerttest/webhook_test.go",
}

func TestUsageSamplesAreTestedCode(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p, err := markdown.Parse(filepath.Join(root, "docs", "usage.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, b := range p.Blocks {
		if b.Check == "" {
			continue
		}
		if isShell(b.Lang) {
			continue // commandBlocks holds them
		}
		file, ok := usageSamples[b.Check]
		if !ok {
			t.Errorf("docs/usage.md:%d: a block marked docs-check: %s, which no check knows", b.Line, b.Check)
			continue
		}
		found[b.Check] = true
		if b.Lang != "go" {
			t.Errorf("docs/usage.md:%d: the %s block is %q, want go", b.Line, b.Check, b.Lang)
		}
		if line, ok := linesInOrder(b.Body, readFile(t, root, file)); !ok {
			t.Errorf("docs/usage.md:%d: the %s block's line %q is not a line of %s (in this order)", b.Line, b.Check, line, file)
		}
	}
	for name, file := range usageSamples {
		if !found[name] {
			t.Errorf("docs/usage.md has no block marked <!-- docs-check: %s --> (the sample from %s)", name, file)
		}
	}
}

// linesInOrder reports whether every non-empty line of sample, normalised, is a line of src after the
// previous one's; when not, it returns the first line that is not.
func linesInOrder(sample, src string) (string, bool) {
	lines := strings.Split(src, "\n")
	next := 0
	for _, line := range strings.Split(sample, "\n") {
		want := normalise(line)
		if want == "" {
			continue
		}
		found := false
		for ; next < len(lines); next++ {
			if normalise(lines[next]) == want {
				found, next = true, next+1
				break
			}
		}
		if !found {
			return strings.TrimSpace(line), false
		}
	}
	return "", true
}

func TestLinesInOrder(t *testing.T) {
	src := "a := 1 // one\nb := 2\n\tc := 3\n"
	for _, tc := range []struct {
		sample string
		want   bool
	}{
		{"a := 1\nc := 3", true},
		{"  a  :=  1 // comment\n// only a comment\n\nb := 2", true},
		{"b := 2\na := 1", false},
		{"d := 4", false},
	} {
		if _, got := linesInOrder(tc.sample, src); got != tc.want {
			t.Errorf("linesInOrder(%q) = %v, want %v", tc.sample, got, tc.want)
		}
	}
}
