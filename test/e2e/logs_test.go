package e2e

import (
	"os"
	"strings"
	"testing"
)

// logContains reports whether the log file at path contains s.
func logContains(t *testing.T, path, s string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading log %s: %v", path, err)
	}
	return strings.Contains(string(data), s)
}
