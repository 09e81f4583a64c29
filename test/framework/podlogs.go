package framework

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// keepPodLogs copies the pods' logs into <cp.Dir>/logs/pods before the node's directory goes, and lists
// them in the control plane's Logs (StartT prints them when a test fails).
func (n *ClusterNode) keepPodLogs() {
	src := filepath.Join(n.Dir, "pod-logs")
	_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".log") {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		// <namespace>_<pod>_<uid>/<container>/<restart>.log
		parts := strings.Split(rel, string(filepath.Separator))
		if len(parts) != 3 {
			return nil
		}
		nsPod := strings.Split(parts[0], "_")
		if len(nsPod) < 2 {
			return nil
		}
		name := fmt.Sprintf("pod-%s-%s-%s-%s", nsPod[0], nsPod[1], parts[1], strings.TrimSuffix(parts[2], ".log"))
		dst := filepath.Join(n.cp.Dir, "logs", "pods", name+".log")
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if os.MkdirAll(filepath.Dir(dst), 0o755) == nil && os.WriteFile(dst, data, 0o644) == nil {
			n.cp.mu.Lock()
			n.cp.logs[name] = dst
			n.cp.mu.Unlock()
		}
		return nil
	})
}

// containerLogsDir is where kubelet links every container's log (fixed in kubelet).
const containerLogsDir = "/var/log/containers"

// removeContainerLogLinks removes kubelet's links in /var/log/containers that point into dir (or into
// any node's directory when dir is "").
func removeContainerLogLinks(dir string) error {
	entries, err := os.ReadDir(containerLogsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(containerLogsDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if (dir != "" && strings.HasPrefix(target, dir+"/")) || (dir == "" && isNodeDir(target)) {
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
