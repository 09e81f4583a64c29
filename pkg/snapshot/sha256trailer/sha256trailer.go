// Package sha256trailer checks the SHA-256 trailer etcd appends to a snapshot it streams
// (Maintenance.Snapshot): the last 32 bytes are the SHA-256 of everything before them, and the database
// before them is a whole number of 512-byte pages. It has no dependency on etcd, so that kubectl-certapi
// can check a copy it receives without linking etcd's server packages.
package sha256trailer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
)

// Writer hashes everything written to it but the last sha256.Size bytes, which it keeps; Check then says
// whether those bytes are the hash of the rest.
type Writer struct {
	h    hash.Hash
	tail []byte
	n    int64
}

// NewWriter returns a Writer with nothing written.
func NewWriter() *Writer { return &Writer{h: sha256.New()} }

// Write never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	w.tail = append(w.tail, p...)
	if over := len(w.tail) - sha256.Size; over > 0 {
		w.h.Write(w.tail[:over])
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	return len(p), nil
}

// Size is how many bytes were written.
func (w *Writer) Size() int64 { return w.n }

// Check reports whether what was written is a whole etcd snapshot: its size ends in the trailer, and the
// trailer is the SHA-256 of the rest.
func (w *Writer) Check() error {
	if w.n%512 != sha256.Size || len(w.tail) != sha256.Size {
		return fmt.Errorf("its size (%d bytes) does not end in etcd's SHA-256 trailer", w.n)
	}
	if !bytes.Equal(w.h.Sum(nil), w.tail) {
		return errors.New("its content does not match etcd's SHA-256 trailer")
	}
	return nil
}
