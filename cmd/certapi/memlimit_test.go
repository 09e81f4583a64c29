package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	const (
		v2Mount = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
		v1Mount = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	)
	for _, tc := range []struct {
		name      string
		cgroup    string
		mountinfo string
		files     map[string]string
		want      int64
		wantFile  string
		wantErr   bool
	}{
		{
			name:      "v2 in a cgroup namespace",
			cgroup:    "0::/\n",
			mountinfo: v2Mount,
			files:     map[string]string{"sys/fs/cgroup/memory.max": "268435456\n"},
			want:      256 << 20,
			wantFile:  "/sys/fs/cgroup/memory.max",
		},
		{
			name:      "v2 without a limit",
			cgroup:    "0::/\n",
			mountinfo: v2Mount,
			files:     map[string]string{"sys/fs/cgroup/memory.max": "max\n"},
		},
		{
			name:      "v2 nested: the lowest limit of the cgroup and its parents",
			cgroup:    "0::/kubepods/pod1/c1\n",
			mountinfo: v2Mount,
			files: map[string]string{
				"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "max\n",
				"sys/fs/cgroup/kubepods/pod1/memory.max":    "134217728\n",
				"sys/fs/cgroup/kubepods/memory.max":         "1073741824\n",
			},
			want:     128 << 20,
			wantFile: "/sys/fs/cgroup/kubepods/pod1/memory.max",
		},
		{
			name:      "v1 without a namespace, limit on a parent",
			cgroup:    "5:cpu:/a/b\n4:memory:/a/b\n0::/\n",
			mountinfo: v1Mount,
			files: map[string]string{
				"sys/fs/cgroup/memory/a/b/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/a/memory.limit_in_bytes":   "536870912\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":     "9223372036854771712\n",
			},
			want:     512 << 20,
			wantFile: "/sys/fs/cgroup/memory/a/memory.limit_in_bytes",
		},
		{
			name:      "v1 unlimited",
			cgroup:    "4:memory:/\n",
			mountinfo: v1Mount,
			files:     map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"},
		},
		{
			name:      "hybrid: the memory controller is on v1",
			cgroup:    "4:memory:/x\n0::/x\n",
			mountinfo: v1Mount + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			files: map[string]string{
				"sys/fs/cgroup/memory/x/memory.limit_in_bytes": "209715200\n",
				"sys/fs/cgroup/unified/x/memory.max":           "104857600\n",
			},
			want:     200 << 20,
			wantFile: "/sys/fs/cgroup/memory/x/memory.limit_in_bytes",
		},
		{
			name:      "mount root below the cgroup root",
			cgroup:    "0::/kubepods/pod1/c1\n",
			mountinfo: "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			files: map[string]string{
				"sys/fs/cgroup/c1/memory.max": "67108864\n",
				"sys/fs/cgroup/memory.max":    "134217728\n",
			},
			want:     64 << 20,
			wantFile: "/sys/fs/cgroup/c1/memory.max",
		},
		{
			name:      "no memory controller",
			cgroup:    "5:cpu:/\n",
			mountinfo: v1Mount,
			wantErr:   true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"proc/self/cgroup": tc.cgroup, "proc/self/mountinfo": tc.mountinfo}
			for p, c := range tc.files {
				files[p] = c
			}
			for p, c := range files {
				full := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, file, err := cgroupMemoryLimit(root)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want || file != tc.wantFile {
				t.Errorf("got %d from %q, want %d from %q", got, file, tc.want, tc.wantFile)
			}
		})
	}
}

func TestCgroupMemoryLimitHere(t *testing.T) {
	// Whatever this machine has, reading it must not fail where a memory controller is mounted.
	limit, file, err := cgroupMemoryLimit("/")
	t.Logf("limit %d from %q, err %v", limit, file, err)
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("unescape = %q", got)
	}
	if got := unescape(`/a\04`); got != `/a\04` {
		t.Errorf("unescape of a short escape = %q", got)
	}
}
