// Package docs checks certapi's documentation: that every relative link of the Markdown pages resolves
// to a file and every #anchor to a heading of it, and that the command blocks of the README's quick starts
// are the commands the project's tests run. It needs no cluster; the quick-start check of the Helm
// install renders the chart with the helm of `make tools`.
package docs

import (
	"os"
	"path/filepath"
)

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
