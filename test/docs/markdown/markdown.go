// Package markdown reads what certapi's documentation checks need of a Markdown page: its links outside
// code, the anchors GitHub gives its headings, and its fenced code blocks with the name of the
// `<!-- docs-check: NAME -->` marker above each. test/docs checks the pages with it, and the tests that run
// a page's command blocks (test/node/etcdcluster runs the README's install) read the blocks with it.
package markdown

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"
)

// Link is one Markdown link found in a page.
type Link struct {
	Line   int
	Target string // as written: path, path#anchor or #anchor
}

// Block is one fenced code block, with the name of the `<!-- docs-check: NAME -->` marker just above it.
type Block struct {
	Line  int
	Lang  string
	Check string
	Body  string
}

// Page is what the checks need of one Markdown file.
type Page struct {
	Links    []Link
	Anchors  map[string]bool
	Blocks   []Block
	Headings []string
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

// Parse reads a Markdown file: its links outside code, its headings' anchors as GitHub makes them, and
// its fenced code blocks.
func Parse(path string) (*Page, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	p := &Page{Anchors: map[string]bool{}}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		inFence             bool
		fenceMark, pendName string
		cur                 Block
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
				cur = Block{Line: n, Lang: m[3], Check: pendName}
				body.Reset()
				pendName = ""
				continue
			case strings.HasPrefix(strings.TrimSpace(line), fenceMark) && strings.TrimSpace(line) == strings.Repeat(string(fenceMark[0]), len(strings.TrimSpace(line))):
				inFence = false
				cur.Body = body.String()
				p.Blocks = append(p.Blocks, cur)
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
			p.Anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			a := AnchorOf(m[2])
			if k := seen[a]; k > 0 {
				p.Anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				p.Anchors[a] = true
			}
			seen[a]++
			p.Headings = append(p.Headings, m[2])
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			p.Links = append(p.Links, Link{Line: n, Target: m[1]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if inFence {
		return nil, fmt.Errorf("%s:%d: a code block is never closed", path, cur.Line)
	}
	return p, nil
}

// BlockBody is the body of the block of the page at path marked <!-- docs-check: name -->, for the tests
// that run a page's block as it is written.
func BlockBody(path, name string) (string, error) {
	p, err := Parse(path)
	if err != nil {
		return "", err
	}
	for _, b := range p.Blocks {
		if b.Check == name {
			return b.Body, nil
		}
	}
	return "", fmt.Errorf("%s has no block marked <!-- docs-check: %s -->", path, name)
}

// AnchorOf is the anchor GitHub gives a heading: the text of its links and code, lower case, with every
// character but letters, digits, spaces, hyphens and underscores dropped, and spaces made hyphens.
func AnchorOf(text string) string {
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
