package docs

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// pending are pages the documentation links to that are written separately and may not be in the tree
// yet: a link to one of them passes while the file is missing (the test logs it), and is checked like
// any other once it exists. Nothing may link to an anchor of a missing page.
var pending = map[string]bool{
	"docs/high-availability.md":  true,
	"docs/backup-and-restore.md": true,
	"docs/release.md":            true,
	"CONTRIBUTING.md":            true,
	"docs/api-reference.md":      true,
	"docs/flags.md":              true,
}

// TestRelativeLinksResolve checks every relative link of README.md, docs/*.md, CONTRIBUTING.md,
// SECURITY.md, CHANGELOG.md and the READMEs under artifacts/: its file exists, and its #anchor, if any,
// is a heading (or an <a name>) of that file.
func TestRelativeLinksResolve(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string]*markdown.Page{}
	load := func(rel string) (*markdown.Page, error) {
		if p, ok := pages[rel]; ok {
			return p, nil
		}
		p, err := markdown.Parse(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		pages[rel] = p
		return p, nil
	}
	checked := 0
	for _, f := range files {
		p, err := load(f)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, l := range p.Links {
			if isExternal(l.Target) {
				continue
			}
			checked++
			if msg := checkLink(root, f, l.Target, load); msg != "" {
				t.Errorf("%s:%d: link %q: %s", f, l.Line, l.Target, msg)
			}
		}
	}
	t.Logf("%d relative links checked in %d files", checked, len(files))
}

func isExternal(target string) bool {
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// checkLink returns what is wrong with a relative link written in the page from (relative to root), or "".
func checkLink(root, from, target string, load func(string) (*markdown.Page, error)) string {
	path, anchor, _ := strings.Cut(target, "#")
	rel := from
	if path != "" {
		unescaped, err := url.PathUnescape(path)
		if err != nil {
			return "not a valid path: " + err.Error()
		}
		rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), unescaped)))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		info, err := os.Stat(filepath.Join(root, rel))
		switch {
		case os.IsNotExist(err) && pending[rel] && anchor == "":
			return ""
		case err != nil:
			return "no such file: " + rel
		case info.IsDir():
			if anchor != "" {
				return "an anchor into a directory"
			}
			return ""
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(rel, ".md") {
		if strings.HasPrefix(anchor, "L") { // a line of a source file
			return ""
		}
		return "an anchor into a file that is not Markdown"
	}
	p, err := load(rel)
	if err != nil {
		return err.Error()
	}
	if !p.Anchors[anchor] {
		return "no heading with anchor #" + anchor + " in " + rel
	}
	return ""
}

// TestAnchorsOfHeadings checks the anchor rule the link check relies on against headings whose GitHub
// anchors are known.
func TestAnchorsOfHeadings(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"The CA: injection, rotation, distrust", "the-ca-injection-rotation-distrust"},
		{"The operator library, pkg/servingcert", "the-operator-library-pkgservingcert"},
		{"Quick start 3: serve a webhook from your operator", "quick-start-3-serve-a-webhook-from-your-operator"},
		{"What happens, in order", "what-happens-in-order"},
		{"Why not kube-apiserver's etcd", "why-not-kube-apiservers-etcd"},
		{"`make test` and [CI](x.md)", "make-test-and-ci"},
		{"Install (HA)", "install-ha"},
		{"snake_case kept", "snake_case-kept"},
	} {
		if got := markdown.AnchorOf(tc.heading); got != tc.want {
			t.Errorf("AnchorOf(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestCheckLink runs the link rule on a small tree of its own, so that each way a link can be wrong is
// seen to fail.
func TestCheckLink(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"README.md":      "# Top\n\n## A section\n",
		"docs/page.md":   "# Page\n\n## Twice\n\n## Twice\n\n<a name=\"custom\"></a>\n",
		"docs/script.go": "package x\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func(rel string) (*markdown.Page, error) { return markdown.Parse(filepath.Join(root, rel)) }
	for _, tc := range []struct {
		from, target string
		wantErr      bool
	}{
		{"README.md", "docs/page.md", false},
		{"README.md", "docs/page.md#twice", false},
		{"README.md", "docs/page.md#twice-1", false},
		{"README.md", "docs/page.md#twice-2", true},
		{"README.md", "docs/page.md#custom", false},
		{"README.md", "#a-section", false},
		{"README.md", "#no-such-section", true},
		{"docs/page.md", "../README.md#top", false},
		{"docs/page.md", "page.md#page", false},
		{"README.md", "docs/missing.md", true},
		{"README.md", "docs/release.md", false},         // pending
		{"README.md", "docs/release.md#anything", true}, // no anchor into a missing page
		{"README.md", "docs", false},
		{"README.md", "docs#x", true},
		{"README.md", "docs/script.go#L1", false},
		{"README.md", "docs/script.go#x", true},
		{"README.md", "../outside.md", true},
	} {
		msg := checkLink(root, tc.from, tc.target, load)
		if (msg != "") != tc.wantErr {
			t.Errorf("checkLink(%s, %q) = %q, want an error: %v", tc.from, tc.target, msg, tc.wantErr)
		}
	}
}
