// Package docs checks certapi's documentation: that every relative link of the Markdown pages resolves
// to a file and every #anchor to a heading of it, and that the command blocks of the README's quick starts
// are the commands the project's tests run. It needs no cluster; the quick-start check of the Helm
// install renders the chart with the helm of `make tools`.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// link is one Markdown link found in a page.
type link struct {
	line   int
	target string // as written: path, path#anchor or #anchor
}

// block is one fenced code block, with the name of the `<!-- docs-check: NAME -->` marker just above it.
type block struct {
	line  int
	lang  string
	check string
	body  string
}

// page is what the checks need of one Markdown file.
type page struct {
	links    []link
	anchors  map[string]bool
	blocks   []block
	headings []string
}

var (
	// inlineLink matches [text](target) and ![alt](target), target without spaces; a title after the
	// target ("...") is allowed and ignored.
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan matches inline code, whose contents are never links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// htmlAnchor matches <a name="x"> or <a id="x">, which GitHub also links to.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// checkMarker names the code block that follows it.
	checkMarker = regexp.MustCompile(`^<!--\s*docs-check:\s*([a-z0-9-]+)\s*-->$`)
	fence       = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	heading     = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// parsePage reads a Markdown file: its links outside code, its headings' anchors as GitHub makes them, and
// its fenced code blocks.
func parsePage(path string) (*page, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	p := &page{anchors: map[string]bool{}}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		inFence             bool
		fenceMark, pendName string
		cur                 block
		body                strings.Builder
		n                   int
	)
	for sc.Scan() {
		n++
		line := sc.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case !inFence:
				inFence, fenceMark = true, m[2]
				cur = block{line: n, lang: m[3], check: pendName}
				body.Reset()
				pendName = ""
				continue
			case strings.HasPrefix(strings.TrimSpace(line), fenceMark) && strings.TrimSpace(line) == strings.Repeat(string(fenceMark[0]), len(strings.TrimSpace(line))):
				inFence = false
				cur.body = body.String()
				p.blocks = append(p.blocks, cur)
				continue
			}
		}
		if inFence {
			body.WriteString(line)
			body.WriteByte('\n')
			continue
		}
		trimmed := strings.TrimSpace(line)
		if m := checkMarker.FindStringSubmatch(trimmed); m != nil {
			pendName = m[1]
			continue
		}
		if trimmed != "" {
			pendName = ""
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			a := anchorOf(m[2])
			if k := seen[a]; k > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				p.anchors[a] = true
			}
			seen[a]++
			p.headings = append(p.headings, m[2])
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			p.links = append(p.links, link{line: n, target: m[1]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if inFence {
		return nil, fmt.Errorf("%s:%d: a code block is never closed", path, cur.line)
	}
	return p, nil
}

// anchorOf is the anchor GitHub gives a heading: the text of its links and code, lower case, with every
// character but letters, digits, spaces, hyphens and underscores dropped, and spaces made hyphens.
func anchorOf(text string) string {
	text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// markdownFiles lists the pages the checks cover, relative to root: the README, every page of docs/,
// the contributor and policy files at the root, and the READMEs under artifacts/.
func markdownFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	for _, name := range []string{"CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			files = append(files, name)
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, rel)
	}
	err = filepath.WalkDir(filepath.Join(root, "artifacts"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "README.md" {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	return files, err
}
