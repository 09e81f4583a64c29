package main

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// memoryLimitFraction is the share of the container's memory limit that certapi gives the Go runtime
// as its soft memory limit when GOMEMLIMIT is unset. The rest is for what the limit also counts and the
// Go runtime does not: the pages of certapi's 85 MB executable that the kernel maps (page cache charged
// to the container), and the C library's memory.
const memoryLimitFraction = 0.75

// setMemoryLimit sets the Go runtime's soft memory limit (debug.SetMemoryLimit) to memoryLimitFraction
// of the cgroup memory limit certapi runs under, unless GOMEMLIMIT is set, and logs what it chose.
// Without a limit (no cgroup memory controller, or no limit on it) it changes nothing: the Go runtime
// then collects only by GOGC. The soft limit makes the GC work harder as the heap nears it, instead of
// letting GOGC's headroom (by default as much again as the live heap) run into the container's limit.
func setMemoryLimit() {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		klog.InfoS("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	limit, file, err := cgroupMemoryLimit("/")
	if err != nil {
		klog.InfoS("No Go memory limit: could not read the cgroup memory limit", "err", err)
		return
	}
	if limit <= 0 {
		klog.InfoS("No Go memory limit: the cgroup has no memory limit")
		return
	}
	soft := int64(float64(limit) * memoryLimitFraction)
	debug.SetMemoryLimit(soft)
	klog.InfoS("Go memory limit set from the cgroup memory limit (set GOMEMLIMIT to choose another)",
		"GOMEMLIMIT", resource.NewQuantity(soft, resource.BinarySI).String(),
		"cgroupLimit", resource.NewQuantity(limit, resource.BinarySI).String(), "file", file, "fraction", memoryLimitFraction)
}

// unlimited is the least value cgroup v1 reports for no limit (the largest page-aligned int64, or more).
const unlimited = int64(1) << 62

// cgroupMemoryLimit returns the lowest memory limit of the cgroup this process is in and of its ancestors
// visible under the cgroup mount (cgroup v2 memory.max, or cgroup v1 memory.limit_in_bytes), and the file
// it read it from. It returns 0 when none of them has a limit. root prefixes /proc and the mount points,
// for tests.
func cgroupMemoryLimit(root string) (int64, string, error) {
	cgroups, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, "", err
	}
	mounts, err := readMounts(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return 0, "", err
	}
	var v1Path, v2Path string
	v2 := false
	for _, line := range strings.Split(string(cgroups), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, v2Path = true, parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1Path = parts[2]
			}
		}
	}
	// A host with both hierarchies mounts the memory controller on one: v1 when a v1 hierarchy has it.
	if v1Path != "" {
		if m, ok := findMount(mounts, func(m mount) bool { return m.fsType == "cgroup" && hasOption(m.superOptions, "memory") }); ok {
			return lowestLimit(root, m, v1Path, "memory.limit_in_bytes")
		}
	}
	if v2 {
		if m, ok := findMount(mounts, func(m mount) bool { return m.fsType == "cgroup2" }); ok {
			return lowestLimit(root, m, v2Path, "memory.max")
		}
	}
	return 0, "", errors.New("no cgroup memory controller is mounted")
}

// lowestLimit reads file in the directory of cgroup path under mount m and in each parent up to the
// mount point, and returns the lowest limit. Directories that do not exist (a cgroup outside what the
// mount shows) or files a parent lacks (cgroup v2's root has no memory.max) are skipped.
func lowestLimit(root string, m mount, cgroupPath, file string) (int64, string, error) {
	rel, ok := strings.CutPrefix(path.Clean(cgroupPath), path.Clean(m.root))
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && path.Clean(m.root) != "/") {
		// The cgroup is outside the mounted subtree (e.g. a cgroup namespace's view): the mount point is
		// the best we can see.
		rel = ""
	}
	var lowest int64
	var from string
	dir := path.Join("/", rel)
	for {
		p := filepath.Join(root, m.mountPoint, dir, file)
		b, err := os.ReadFile(p)
		switch {
		case err == nil:
			v, perr := parseLimit(string(b))
			if perr != nil {
				return 0, "", perr
			}
			if v > 0 && (lowest == 0 || v < lowest) {
				lowest, from = v, filepath.Join(m.mountPoint, dir, file)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return 0, "", err
		}
		if dir == "/" {
			return lowest, from, nil
		}
		dir = path.Dir(dir)
	}
}

// parseLimit parses memory.max or memory.limit_in_bytes; 0 means no limit.
func parseLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// A value beyond int64 is no limit too.
		if u, uerr := strconv.ParseUint(s, 10, 64); uerr == nil && u > uint64(unlimited) {
			return 0, nil
		}
		return 0, err
	}
	if v >= unlimited {
		return 0, nil
	}
	return v, nil
}

type mount struct {
	root, mountPoint, fsType, superOptions string
}

// readMounts parses /proc/self/mountinfo: "id parent major:minor root mount-point options [optional...] - fstype source super-options".
func readMounts(file string) ([]mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []mount
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		ms = append(ms, mount{root: unescape(fields[3]), mountPoint: unescape(fields[4]), fsType: fields[sep+1], superOptions: fields[sep+3]})
	}
	return ms, s.Err()
}

func findMount(ms []mount, match func(mount) bool) (mount, bool) {
	for _, m := range ms {
		if match(m) {
			return m, true
		}
	}
	return mount{}, false
}

func hasOption(options, want string) bool {
	for _, o := range strings.Split(options, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space, and so on).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
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
