package image

import (
	"bufio"
	"debug/elf"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/certapi/certapi/test/framework"
)

// nodeImage is what make images promises about one archive.
type nodeImage struct {
	file, tag  string
	entrypoint string
	// files are the root file system's regular files and directories (name: mode).
	files map[string]int64
	// run runs the binary from the unpacked root file system and checks what it does.
	run func(t *testing.T, bin string, cf *v1.ConfigFile)
}

// distroless is the layout of the images with /etc/passwd, /etc/group and /tmp.
func distroless(dirs []string, bin string) map[string]int64 {
	files := map[string]int64{"etc": 0o755, "etc/group": 0o644, "etc/passwd": 0o644, "tmp": 0o1777, bin: 0o755}
	for _, d := range dirs {
		files[d] = 0o755
	}
	return files
}

// TestImages builds make images' four archives (`go run ./hack/image --all`, which needs _output/bin/coredns
// from make tools), reads each back as containerd's import does (the docker-archive manifest.json with its
// RepoTags, and the OCI layout with its name annotation), checks its configuration, runs its binary from
// the unpacked root file system, and checks that a second build with nothing changed writes nothing.
func TestImages(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "images")
	build := func() string {
		t.Helper()
		cmd := exec.Command("go", "run", "./hack/image", "--all", "--output-dir", out)
		cmd.Dir = root
		stdout, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go run ./hack/image --all: %v\n%s", err, stdout)
		}
		t.Logf("%s", stdout)
		return string(stdout)
	}
	build()

	images := []nodeImage{
		{file: "certapi.tar", tag: "certapi.dev/certapi:dev", entrypoint: "/usr/local/bin/certapi",
			files: distroless([]string{"usr", "usr/local", "usr/local/bin"}, "usr/local/bin/certapi"),
			run: func(t *testing.T, bin string, cf *v1.ConfigFile) {
				out, err := exec.Command(bin, "--version").CombinedOutput()
				if v := cf.Config.Labels["org.opencontainers.image.version"]; err != nil || !strings.HasPrefix(string(out), "certapi "+v+" ") {
					t.Errorf("certapi --version: %v, printed %q, want the version label %q", err, out, v)
				}
			}},
		{file: "example-webhook.tar", tag: "certapi.dev/example-webhook:dev", entrypoint: "/usr/local/bin/example-webhook",
			files: distroless([]string{"usr", "usr/local", "usr/local/bin"}, "usr/local/bin/example-webhook"),
			run: func(t *testing.T, bin string, _ *v1.ConfigFile) {
				out, err := exec.Command(bin, "--help").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "-request") {
					t.Errorf("example-webhook --help: %v, printed %q", err, out)
				}
			}},
		{file: "pause.tar", tag: "certapi.dev/pause:3.10", entrypoint: "/pause",
			files: map[string]int64{"pause": 0o755},
			run:   runPause},
		{file: "coredns.tar", tag: "certapi.dev/coredns:dev", entrypoint: "/coredns",
			files: distroless(nil, "coredns"),
			run:   runCoreDNS},
	}
	for _, want := range images {
		t.Run(want.file, func(t *testing.T) {
			checkNodeImage(t, filepath.Join(out, want.file), filepath.Join(dir, strings.TrimSuffix(want.file, ".tar")), want)
		})
	}

	// Nothing changed: nothing is written again.
	before := map[string]os.FileInfo{}
	for _, want := range images {
		if before[want.file], err = os.Stat(filepath.Join(out, want.file)); err != nil {
			t.Fatal(err)
		}
	}
	second := build()
	for _, want := range images {
		path := filepath.Join(out, want.file)
		if !strings.Contains(second, path+" is current") {
			t.Errorf("the second build did not find %s current", path)
		}
		after, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(before[want.file], after) || !after.ModTime().Equal(before[want.file].ModTime()) {
			t.Errorf("the second build rewrote %s", path)
		}
	}
}

func checkNodeImage(t *testing.T, archive, dir string, want nodeImage) {
	// The docker-archive side: containerd's import names the image after manifest.json's RepoTags.
	mf, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(mf) != 1 || !slices.Equal(mf[0].RepoTags, []string{want.tag}) {
		t.Fatalf("manifest.json %+v, want one image tagged %s", mf, want.tag)
	}
	tag, err := name.NewTag(want.tag, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("reading %s from the docker-archive: %v", want.tag, err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image does not validate: %v", err)
	}

	// The OCI layout side names it too, with the annotation containerd reads.
	layoutDir := filepath.Join(dir, "layout")
	untar(t, archive, layoutDir)
	idx, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["io.containerd.image.name"] != want.tag {
		t.Fatalf("index.json %+v, want one image named %s", im.Manifests, want.tag)
	}
	ociImg, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digests(t, ociImg), digests(t, img); !slices.Equal(a, b) {
		t.Fatalf("the two sides differ: %v and %v", a, b)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{want.entrypoint}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [%s]", c.Entrypoint, c.Cmd, want.entrypoint)
	}
	if c.Labels["org.opencontainers.image.title"] == "" || c.Labels["org.opencontainers.image.description"] == "" || c.Labels["org.opencontainers.image.version"] == "" {
		t.Errorf("labels %v, want a title, a description and a version", c.Labels)
	}
	if layers, err := img.Layers(); err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want one on an empty base", len(layers), err)
	}

	rootfs := filepath.Join(dir, "rootfs")
	extract := mutate.Extract(img)
	defer extract.Close()
	if files := untarReader(t, extract, rootfs); !maps.Equal(files, want.files) {
		t.Errorf("root file system (name: mode) %v, want exactly %v", files, want.files)
	}
	bin := filepath.Join(rootfs, strings.TrimPrefix(want.entrypoint, "/"))
	checkStatic(t, bin)
	want.run(t, bin, cf)
}

// runPause starts pause, waits for it to say it handles signals, sends SIGTERM and expects exit status 0.
func runPause(t *testing.T, bin string, _ *v1.ConfigFile) {
	cmd := exec.Command(bin)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	for lines.Scan() && !strings.Contains(lines.Text(), "waiting for SIGINT or SIGTERM") {
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("pause after SIGTERM: %v, want exit status 0", err)
	}
}

// runCoreDNS checks the version against the image's label, and that the cluster DNS plugins are linked
// and the cloud ones are not.
func runCoreDNS(t *testing.T, bin string, cf *v1.ConfigFile) {
	out, err := exec.Command(bin, "-version").CombinedOutput()
	if v := strings.TrimPrefix(cf.Config.Labels["org.opencontainers.image.version"], "v"); err != nil || !strings.HasPrefix(string(out), "CoreDNS-"+v+"\n") {
		t.Errorf("coredns -version: %v, printed %q, want CoreDNS-%s", err, out, v)
	}
	out, err = exec.Command(bin, "-plugins").CombinedOutput()
	if err != nil {
		t.Fatalf("coredns -plugins: %v\n%s", err, out)
	}
	plugins := strings.Fields(string(out))
	for _, p := range []string{"kubernetes", "forward", "cache", "errors", "health", "ready", "loop", "reload", "prometheus", "loadbalance", "log"} {
		if !slices.Contains(plugins, p) {
			t.Errorf("coredns -plugins lacks %s: %v", p, plugins)
		}
	}
	for _, p := range []string{"route53", "azure", "clouddns", "etcd", "file", "hosts"} {
		if slices.Contains(plugins, p) {
			t.Errorf("coredns links %s, which a cluster DNS does not need", p)
		}
	}
	if _, ok := cf.Config.ExposedPorts["1053/udp"]; !ok {
		t.Errorf("exposed ports %v, want 1053/udp (a non-root CoreDNS cannot bind 53)", cf.Config.ExposedPorts)
	}
}

// checkStatic fails the test when bin has an ELF interpreter or links shared libraries.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: it is not static (CGO_ENABLED=0)", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s links %v: it is not static", bin, libs)
	}
}
