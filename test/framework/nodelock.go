package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// nodeDirPrefix starts the base name of every node's directory under the machine's temporary directory.
const nodeDirPrefix = "cnode-"

// isNodeDir reports whether path is in a node's directory.
func isNodeDir(path string) bool {
	rel, err := filepath.Rel(os.TempDir(), path)
	return err == nil && strings.HasPrefix(rel, nodeDirPrefix) && !strings.HasPrefix(rel, "..")
}

func acquireNodeLock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(nodeLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the node lock %s: %w", nodeLockPath, err)
	}
	ctx, cancel := context.WithTimeout(ctx, NodeLockTimeout)
	defer cancel()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", nodeLockPath, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another test's node to end (lock %s): %w", nodeLockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
