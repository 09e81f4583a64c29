package sha256trailer

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func TestWriter(t *testing.T) {
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte(i)
	}
	sum := sha256.Sum256(body)
	good := append(append([]byte(nil), body...), sum[:]...)
	flipped := append([]byte(nil), good...)
	flipped[10] ^= 1
	for _, tc := range []struct {
		name   string
		data   []byte
		chunks int
		want   string
	}{
		{"whole", good, 1, ""},
		{"in small writes", good, 100, ""},
		{"truncated", good[:len(good)-1], 3, "does not end in"},
		{"empty", nil, 1, "does not end in"},
		{"changed", flipped, 7, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter()
			step := max(1, len(tc.data)/tc.chunks)
			for i := 0; i < len(tc.data); i += step {
				_, _ = w.Write(tc.data[i:min(len(tc.data), i+step)])
			}
			err := w.Check()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}
