package etcdcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PKIDirName is the member's TLS directory inside its Dir: its certificate and key, and the peer CA's
// certificate.
const PKIDirName = "etcd-pki"

// LocalClientURLFileName is the file inside a member's Dir that holds the client URL the member answers on
// its own host (https://127.0.0.1:2379), written each time it starts, so that a command run in its pod
// with the same --data-dir (`certapi snapshot save`) reaches it with the member's own TLS files.
const LocalClientURLFileName = "etcd-local-client-url"

// LocalClient is how a process on a member's host reaches the member that runs in a Dir.
type LocalClient struct {
	// URL is the member's client URL on its own host.
	URL string
	// CertFile, KeyFile and CAFile are the member's TLS files, good for a client of it.
	CertFile, KeyFile, CAFile string
}

// FindLocalClient returns the LocalClient of the member that runs, or ran, in dir; an error that wraps
// os.ErrNotExist when no member of a cluster ever started there.
func FindLocalClient(dir string) (LocalClient, error) {
	b, err := os.ReadFile(filepath.Join(dir, LocalClientURLFileName))
	if err != nil {
		return LocalClient{}, fmt.Errorf("reading the etcd member's client URL: %w", err)
	}
	url := strings.TrimSpace(string(b))
	if !strings.HasPrefix(url, "https://") {
		return LocalClient{}, fmt.Errorf("%s holds %q, not an https client URL", filepath.Join(dir, LocalClientURLFileName), url)
	}
	f := newPKIFiles(filepath.Join(dir, PKIDirName))
	for _, p := range []string{f.CertFile, f.TrustedCAFile} {
		if _, err := os.Stat(p); err != nil {
			return LocalClient{}, fmt.Errorf("the etcd member's TLS files: %w", err)
		}
	}
	return LocalClient{URL: url, CertFile: f.CertFile, KeyFile: f.KeyFile, CAFile: f.TrustedCAFile}, nil
}

// writeLocalClientURL records the member's local client URL (LocalClientURLFileName).
func (m *Member) writeLocalClientURL() error {
	path := filepath.Join(m.cfg.Dir, LocalClientURLFileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(m.localClientURL()+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the member's client URL: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("recording the member's client URL: %w", err), os.Remove(tmp))
	}
	return nil
}
