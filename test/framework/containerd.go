package framework

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// containerdNamespace is the containerd namespace of the CRI plugin, where kubelet's pods and images live.
const containerdNamespace = "k8s.io"

// containerdConfig is containerd's configuration (version 2, which containerd 1.6 and 1.7 read): every path
// under the node's directory, the CRI plugin with runc through cgroupfs (SystemdCgroup=false: kubelet's
// cgroupDriver is cgroupfs), the sandbox image imported from _output/images, and the CNI configuration of
// the node's bridge. Network namespaces are bind-mounted under the state directory, so that the node's
// cleanup finds them with its other mounts.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  # Without CAP_SYS_RESOURCE (as on this project's machines) runc cannot lower a process's oom_score_adj below
  # its own: keep what kubelet asks for no lower than containerd's.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`

// cniBinDirs are where Debian's containernetworking-plugins (and upstream's tarball) put the plugins.
var cniBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

func cniBinDir() (string, error) {
	for _, d := range cniBinDirs {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no CNI plugins (bridge, host-local, loopback) in %s: install Debian's containernetworking-plugins", strings.Join(cniBinDirs, " or "))
}

// startContainerd writes containerd's configuration and starts it, and waits until it answers.
func (n *ClusterNode) startContainerd(ctx context.Context, sandboxImage string) error {
	bin, err := hostBinary("containerd", "containerd")
	if err != nil {
		return err
	}
	cniBin, err := cniBinDir()
	if err != nil {
		return err
	}
	d := filepath.Join(n.Dir, "containerd")
	n.containerdSocket = filepath.Join(d, "containerd.sock")
	cfg := fmt.Sprintf(containerdConfig, filepath.Join(d, "root"), filepath.Join(d, "state"), n.containerdSocket,
		filepath.Join(d, "opt"), sandboxImage, filepath.Join(d, "runc"), cniBin, n.network.confDir)
	cfgPath := filepath.Join(d, "config.toml")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if err := writeFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	p, err := n.launch(ctx, ProcessContainerd, bin, []string{"--config", cfgPath})
	if err != nil {
		return err
	}
	return PollUntil(ctx, pollInterval, 30*time.Second, "containerd at "+n.containerdSocket, []*Process{p}, func(ctx context.Context) (bool, string) {
		out, err := n.ctr(ctx, "version")
		if err != nil {
			return false, err.Error()
		}
		return true, out
	})
}

// ctr runs containerd's ctr against the node's containerd, in the CRI namespace.
func (n *ClusterNode) ctr(ctx context.Context, args ...string) (string, error) {
	return command(ctx, "ctr", append([]string{"--address", n.containerdSocket, "--namespace", containerdNamespace}, args...)...)
}

// TagImage gives the image src, already in the node's containerd, the further name dst (replacing an
// image of that name), as a registry would serve one image under a new tag: a pod asking for dst with
// imagePullPolicy IfNotPresent or Never runs it.
func (n *ClusterNode) TagImage(ctx context.Context, src, dst string) error {
	if _, err := n.ctr(ctx, "images", "tag", "--force", src, dst); err != nil {
		return fmt.Errorf("tagging %s as %s in the node's containerd: %w", src, dst, err)
	}
	return nil
}

// PauseContainer freezes the processes of a container of the node (its CRI container ID, as a pod's
// status gives it after "containerd://"), as a machine that stops answering: nothing exits, nothing
// answers, until ResumeContainer.
func (n *ClusterNode) PauseContainer(ctx context.Context, id string) error {
	err := retryFreeze(ctx, pauseAttempts, func() error {
		_, err := n.ctr(ctx, "tasks", "pause", id)
		return err
	}, func() {
		_, _ = n.ctr(ctx, "tasks", "resume", id) // a freeze that did not complete may leave some tasks frozen
	})
	if err != nil {
		return fmt.Errorf("pausing container %s: %w", id, err)
	}
	return nil
}

// pauseAttempts is how many times PauseContainer asks runc to freeze a container.
const pauseAttempts = 5

// retryFreeze calls pause up to attempts times while it fails with runc's "unable to freeze": the cgroup
// freezer gives up when a task of the container does not stop in time, which a loaded machine (make
// test's jobs side by side) made happen once in CI. After each such failure thaw undoes what froze, so
// that the next attempt starts from a running container. Any other error is returned at once.
func retryFreeze(ctx context.Context, attempts int, pause func() error, thaw func()) error {
	var err error
	for i := range attempts {
		if err = pause(); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			return err
		}
		thaw()
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(i+1) * 200 * time.Millisecond):
		}
	}
	return err
}

// ResumeContainer thaws a container PauseContainer froze.
func (n *ClusterNode) ResumeContainer(ctx context.Context, id string) error {
	if _, err := n.ctr(ctx, "tasks", "resume", id); err != nil {
		return fmt.Errorf("resuming container %s: %w", id, err)
	}
	return nil
}

// ContainerdAddress is the socket of the node's containerd, for `ctr --address` (images live in its
// k8s.io namespace, where kubelet looks for them).
func (n *ClusterNode) ContainerdAddress() string { return n.containerdSocket }

// ImportImage imports an image archive (an OCI layout or docker-archive tar, such as `make images` writes)
// into the node's containerd, where kubelet finds it for pods whose imagePullPolicy is Never or
// IfNotPresent, and returns the names it was imported under.
func (n *ClusterNode) ImportImage(ctx context.Context, archive string) ([]string, error) {
	names, err := ArchiveImageNames(archive)
	if err != nil {
		return nil, err
	}
	if _, err := n.ctr(ctx, "images", "import", archive); err != nil {
		return nil, fmt.Errorf("importing %s into the node's containerd: %w", archive, err)
	}
	return names, nil
}

// ArchiveImageNames returns the names an image archive tags its image with: the RepoTags of its
// docker-archive manifest.json, normalised as containerd and kubelet normalise them
// (certapi:dev -> docker.io/library/certapi:dev).
func ArchiveImageNames(archive string) ([]string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("opening image archive: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("image archive %s has no manifest.json (a docker-archive side)", archive)
		}
		if err != nil {
			return nil, fmt.Errorf("reading image archive %s: %w", archive, err)
		}
		if filepath.Clean(h.Name) != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			return nil, fmt.Errorf("reading manifest.json of %s: %w", archive, err)
		}
		var names []string
		for _, m := range manifest {
			for _, t := range m.RepoTags {
				names = append(names, NormalizeImageName(t))
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("image archive %s names no image (manifest.json has no RepoTags)", archive)
		}
		return names, nil
	}
}

// NormalizeImageName completes a short image reference as the Docker reference grammar does:
// certapi:dev -> docker.io/library/certapi:dev, me/x:1 -> docker.io/me/x:1; a name with a registry host
// (a first component with a dot or a colon, or localhost) is kept.
func NormalizeImageName(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	if !found {
		return "docker.io/library/" + ref
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return ref
	}
	return "docker.io/" + first + "/" + rest
}

// stopContainerd stops every container containerd still runs (kubelet has stopped those of the pods it
// knew), then containerd, then any shim left behind.
func (n *ClusterNode) stopContainerd(ctx context.Context) error {
	var errs []error
	if n.containerd != nil {
		if done, _ := n.containerd.Exited(); !done {
			if out, err := n.ctr(ctx, "tasks", "ls", "-q"); err == nil {
				for _, id := range strings.Fields(out) {
					if _, err := n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id); err != nil {
						errs = append(errs, err)
					}
					// A task just killed is deleted once it has exited; retried a little.
					for range 50 {
						if _, err := n.ctr(ctx, "tasks", "delete", id); err == nil {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
			}
			if out, err := n.ctr(ctx, "containers", "ls", "-q"); err == nil {
				for _, id := range strings.Fields(out) {
					if _, err := n.ctr(ctx, "containers", "delete", id); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		if err := n.containerd.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killShims(n.containerdSocket); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killShims kills every containerd shim serving the containerd at socket (any node's, when socket is "").
func killShims(socket string) error {
	pids, err := shimPIDs(socket)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		left, err := shimPIDs(socket)
		if err != nil || len(left) == 0 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("containerd shims %v did not exit after SIGKILL", pids)
}

// shimPIDs lists the containerd shims whose -address is socket, or any node's (under a directory of
// nodeDirPattern) when socket is "".
func shimPIDs(socket string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a != "-address" || i+1 >= len(args) {
				continue
			}
			if (socket != "" && args[i+1] == socket) || (socket == "" && isNodeDir(args[i+1])) {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// mountsUnder lists the mount points at or below dir, deepest first, from /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountPath(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll detaches every mount at or below dir (kubelet's volumes, containers' root file systems,
// network namespaces), deepest first, until none is left.
func unmountAll(dir string) error {
	for range 5 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("mounts left under %s: %s", dir, strings.Join(mps, ", "))
	}
	return nil
}
