// Command image builds container images without a Docker engine: certapi's (make image), and for the test
// node (make images) certapi's, the example webhook's, a pause image and CoreDNS's. Each is a static binary
// (CGO_ENABLED=0) in an empty base, written as an image archive that `ctr images import`, `docker load`,
// `podman load` and `crane push` accept. The archive holds the image twice over the same blobs, as
// `docker save` has since Docker 25: an OCI image layout (oci-layout, index.json, blobs/sha256/...) and
// the manifest.json of the older docker-archive format, whose RepoTags name the image.
//
// certapi's and the example webhook's user, entrypoint, exposed ports, labels and binary path come from
// the final stage of their Dockerfiles, so the two ways of building cannot drift apart; the pause and
// CoreDNS images are described here. Only go-containerregistry (pure Go) is used; nothing runs in a
// container.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/certapi/certapi/hack/internal/buildsource"
)

// Labels hack/image adds to the Dockerfile's, from the source it builds.
const (
	labelTitle       = "org.opencontainers.image.title"
	labelDescription = "org.opencontainers.image.description"
	labelVersion     = "org.opencontainers.image.version"
	labelRevision    = "org.opencontainers.image.revision"
	labelSource      = "org.opencontainers.image.source"
	labelCreated     = "org.opencontainers.image.created"
)

// nonroot is the user the images run as: uid and gid 65532, "nonroot" as distroless names it.
const nonroot = "65532:65532"

// spec is one image hack/image builds.
type spec struct {
	// name is the image's short name: --image NAME, and NAME.tar under --output-dir.
	name string
	// tag is the name and tag make images gives it: what the test node's manifests and containerd's
	// sandbox_image refer to once the archive is imported.
	tag string
	// pkg is the Go main package built into the image; "" for a binary built by hack/build-tools.sh.
	pkg string
	// binary is, when pkg is "", that binary's path relative to the repository root.
	binary string
	// dockerfile, when set, is the Dockerfile whose final stage gives the configuration; otherwise
	// stage does.
	dockerfile string
	stage      stage
	// minimal images hold their binary and nothing else; the others also /etc/passwd, /etc/group and
	// /tmp, as distroless/static has them.
	minimal bool
}

// specs are the images make images builds, in order.
var specs = []spec{
	{name: "certapi", tag: "certapi.dev/certapi:dev", pkg: "./cmd/certapi", dockerfile: filepath.Join("artifacts", "deploy", "Dockerfile")},
	{name: "example-webhook", tag: "certapi.dev/example-webhook:dev", pkg: "./artifacts/examples/webhook", dockerfile: filepath.Join("artifacts", "examples", "webhook", "Dockerfile")},
	// The sandbox image, as registry.k8s.io/pause:3.10 is: one static binary at /pause. Unlike kubernetes'
	// (65535) it runs as the same non-root user as the other images.
	{name: "pause", tag: "certapi.dev/pause:3.10", pkg: "./hack/image/pause", minimal: true, stage: stage{
		user: nonroot, entrypoint: []string{"/pause"}, binary: "pause",
		labels: map[string]string{labelTitle: "pause", labelDescription: "Holds a pod's namespaces open and reaps its zombies until SIGTERM (hack/image/pause, after kubernetes' build/pause)"},
	}},
	// CoreDNS with only the plugins a cluster DNS needs (hack/tools/coredns). It runs as non-root with no
	// capability, so it cannot bind port 53: its Corefile listens on 1053 and the kube-dns Service maps
	// port 53 to that (targetPort: 1053). Granting NET_BIND_SERVICE instead would need a file capability
	// on the binary, and then every pod that drops ALL capabilities would fail to start it (EPERM at exec).
	{name: "coredns", tag: "certapi.dev/coredns:dev", binary: filepath.Join("_output", "bin", "coredns"), stage: stage{
		user: nonroot, entrypoint: []string{"/coredns"}, binary: "coredns", ports: []string{"1053/udp", "1053/tcp"},
		labels: map[string]string{labelTitle: "coredns", labelDescription: "CoreDNS with the plugins of a cluster DNS, built by certapi's hack/tools/coredns", labelSource: "https://github.com/coredns/coredns"},
	}},
}

func lookup(name string) (spec, bool) {
	i := slices.IndexFunc(specs, func(s spec) bool { return s.name == name })
	if i < 0 {
		return spec{}, false
	}
	return specs[i], true
}

func main() {
	var o options
	flag.StringVar(&o.image, "image", "certapi", "The image to build: certapi, example-webhook, pause or coredns.")
	flag.BoolVar(&o.all, "all", false, "Build every image (make images) into --output-dir as NAME.tar, each with its fixed name and tag (certapi.dev/NAME:...).")
	flag.StringVar(&o.output, "output", "", "Where to write the one image's archive. Default: _output/certapi-image.tar for certapi, --output-dir/NAME.tar for the others.")
	flag.StringVar(&o.outputDir, "output-dir", filepath.Join("_output", "images"), "Where --all (and an --image other than certapi without --output) writes NAME.tar.")
	flag.StringVar(&o.binDir, "bin-dir", filepath.Join("_output", "images", "bin"), "Where the static binaries are linked; kept, so that an unchanged binary is not linked again.")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the images (their OS is linux).")
	flag.StringVar(&o.indexDir, "index-dir", "", "Write certapi's image for every architecture of --arch (comma-separated: amd64,arm64) as one multi-architecture image index into this OCI image layout directory (make release), instead of an archive.")
	flag.StringVar(&o.tag, "tag", "", "The name and tag of the one image in its archive. Default: certapi:<version> for certapi, the fixed name (certapi.dev/NAME:...) for the others.")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	image, output, outputDir, binDir, arch, tag, indexDir string
	all                                                   bool
}

// job is one archive to write.
type job struct {
	spec
	out, tag string
}

// jobs resolves the options into what to build.
func (o options) jobs(version string) ([]job, error) {
	if o.all {
		if o.output != "" || o.tag != "" {
			return nil, errors.New("--all writes every image into --output-dir with its own name: --output and --tag name one image")
		}
		var js []job
		for _, s := range specs {
			js = append(js, job{spec: s, out: filepath.Join(o.outputDir, s.name+".tar"), tag: s.tag})
		}
		return js, nil
	}
	s, ok := lookup(o.image)
	if !ok {
		var names []string
		for _, s := range specs {
			names = append(names, s.name)
		}
		return nil, fmt.Errorf("--image %q: want one of %s", o.image, strings.Join(names, ", "))
	}
	j := job{spec: s, out: o.output, tag: o.tag}
	if j.out == "" {
		j.out = filepath.Join(o.outputDir, s.name+".tar")
		if s.name == "certapi" {
			j.out = filepath.Join("_output", "certapi-image.tar")
		}
	}
	if j.tag == "" {
		j.tag = s.tag
		if s.name == "certapi" {
			j.tag = "certapi:" + strings.TrimPrefix(version, "v")
		}
	}
	return []job{j}, nil
}

func run(o options) error {
	start := time.Now()
	src, err := sourceInfo()
	if err != nil {
		return err
	}
	if o.indexDir != "" {
		return writeIndex(o, src)
	}
	js, err := o.jobs(src.Version)
	if err != nil {
		return err
	}
	for i := range js {
		if js[i].dockerfile != "" {
			if js[i].stage, err = readFinalStage(js[i].dockerfile); err != nil {
				return err
			}
		}
	}
	// One hack/image at a time per --bin-dir: go build copies a linked binary into place, and a second
	// run could read it half-written.
	unlock, err := lock(o.binDir)
	if err != nil {
		return err
	}
	defer unlock()
	bins, err := buildBinaries(o.binDir, o.arch, src, js)
	if err != nil {
		return err
	}
	self, err := selfDigest()
	if err != nil {
		return err
	}
	for _, j := range js {
		if err := write(j, bins[j.name], o.arch, src, self); err != nil {
			return fmt.Errorf("%s: %w", j.name, err)
		}
	}
	fmt.Printf("done in %s\n", time.Since(start).Round(100*time.Millisecond))
	if !o.all {
		out := js[0].out
		fmt.Printf("load it with `docker load -i %s` or `podman load -i %s`; push it with `crane push %s REGISTRY/%s:TAG`\n", out, out, out, js[0].name)
	}
	return nil
}

// write builds j's image from bin and writes its archive, unless the archive is there already from the
// same inputs (a stamp beside it records them).
func write(j job, bin, arch string, src source, self string) error {
	src, err := j.source(bin, src)
	if err != nil {
		return err
	}
	binSum, err := fileDigest(bin)
	if err != nil {
		return err
	}
	if err := checkPlatform(bin, arch); err != nil {
		return err
	}
	stampPath := filepath.Join(filepath.Dir(j.out), "."+filepath.Base(j.out)+".stamp")
	stamp := fmt.Sprintf("hack/image %s\nbinary %s\ntag %s\narch %s\nstage %#v\nminimal %t\nsource %#v\n", self, binSum, j.tag, arch, j.stage, j.minimal, src)
	if old, err := os.ReadFile(stampPath); err == nil && string(old) == stamp {
		if _, err := os.Stat(j.out); err == nil {
			fmt.Printf("%s is current: %s (linux/%s)\n", j.out, j.tag, arch)
			return nil
		}
	}
	os.Remove(stampPath)
	img, err := buildImage(bin, arch, j.stage, j.minimal, src)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "certapi-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := writeArchive(j.out, work, img, j.tag, src.Time); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s (linux/%s, %s)\n", j.out, j.tag, arch, digest)
	return os.WriteFile(stampPath, []byte(stamp), 0o644)
}

// source is what an image records about where it came from: certapi's commit for the images of certapi's
// own programs; for CoreDNS, the CoreDNS module's version and the Unix epoch as its time, so that its image
// changes only with its binary, not with every commit of certapi.
func (j job) source(bin string, src source) (source, error) {
	if j.pkg != "" {
		return src, nil
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return source{}, fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/coredns/coredns" {
			return source{Version: d.Version, Time: time.Unix(0, 0).UTC()}, nil
		}
	}
	return source{}, fmt.Errorf("%s was not built from github.com/coredns/coredns", bin)
}

// buildBinaries links the Go programs of js, static, into binDir in one go build (which links only what
// changed), and returns every job's binary by name; a job without a package names a binary built by
// hack/build-tools.sh, which must exist.
func buildBinaries(binDir, arch string, src source, js []job) (map[string]string, error) {
	bins := map[string]string{}
	var pkgs []string
	for _, j := range js {
		if j.pkg == "" {
			if _, err := os.Stat(j.binary); err != nil {
				return nil, fmt.Errorf("the %s image needs %s: run `make tools` (hack/build-tools.sh) first: %w", j.name, j.binary, err)
			}
			bins[j.name] = j.binary
			continue
		}
		pkgs = append(pkgs, j.pkg)
		bins[j.name] = filepath.Join(binDir, arch, filepath.Base(j.pkg))
	}
	if len(pkgs) == 0 {
		return bins, nil
	}
	dir := filepath.Join(binDir, arch) + string(os.PathSeparator)
	args := append([]string{"build"}, staticBuildFlags(src)...)
	args = append(args, "-o", dir)
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building %s for linux/%s: %w", strings.Join(pkgs, " "), arch, err)
	}
	return bins, nil
}

// staticBuildFlags are the flags the images' Go programs are built with, as artifacts/deploy/Dockerfile
// builds certapi (with CGO_ENABLED=0): trimmed paths, no symbol table, the version linked in, into
// pkg/version for certapi and into main.version for the pause program.
func staticBuildFlags(src source) []string {
	return []string{"-trimpath", "-ldflags=-s -w -X main.version=" + src.Version + " " + src.LDFlags}
}

// checkPlatform refuses a binary that is not a static linux/arch executable.
func checkPlatform(bin, arch string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s: not a Linux executable: %w", bin, err)
	}
	defer f.Close()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV, "386": elf.EM_386}
	if m, ok := machines[arch]; ok && f.Machine != m {
		return fmt.Errorf("%s is for %v, not %s: build it with GOARCH=%s", bin, f.Machine, arch, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", bin)
		}
	}
	return nil
}

// lock takes an exclusive lock on dir/.lock, waiting for another hack/image to finish with dir.
func lock(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		fmt.Printf("waiting for another hack/image to finish with %s\n", dir)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// fileDigest is the sha256 of a file's content, in hex.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// selfDigest identifies this program's build, so that a change to hack/image rewrites every archive.
func selfDigest() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return fileDigest(exe)
}

// stage is what the Dockerfile's final stage says about the image.
type stage struct {
	user       string
	entrypoint []string
	ports      []string
	labels     map[string]string
	// binary is where the final stage copies the binary, without the leading slash.
	binary string
}

// readFinalStage reads USER, EXPOSE, ENTRYPOINT (exec form), LABEL and the COPY of the binary from the
// last FROM of path on. Instructions it does not know in that stage are an error: the image would
// silently differ from what docker builds.
func readFinalStage(path string) (stage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stage{}, err
	}
	// Join continuation lines; drop comments and blank lines.
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		cur.WriteString(t)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	last := -1
	for i, l := range lines {
		if strings.EqualFold(strings.Fields(l)[0], "FROM") {
			last = i
		}
	}
	if last < 0 {
		return stage{}, fmt.Errorf("%s: no FROM", path)
	}
	st := stage{labels: map[string]string{}}
	for _, l := range lines[last+1:] {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "USER":
			st.user = rest
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				st.ports = append(st.ports, p)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.entrypoint); err != nil {
				return stage{}, fmt.Errorf("%s: ENTRYPOINT must be in exec form (a JSON array): %w", path, err)
			}
		case "LABEL":
			if err := parseLabels(rest, st.labels); err != nil {
				return stage{}, fmt.Errorf("%s: LABEL %s: %w", path, rest, err)
			}
		case "COPY":
			f := strings.Fields(rest)
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") || st.binary != "" {
				return stage{}, fmt.Errorf("%s: COPY %s: want one COPY --from=STAGE BINARY DEST, of the binary", path, rest)
			}
			st.binary = strings.TrimPrefix(f[2], "/")
		default:
			return stage{}, fmt.Errorf("%s: hack/image does not know %s in the final stage; teach it, or the two images would differ", path, instr)
		}
	}
	switch {
	case st.user == "" || len(st.entrypoint) == 0 || st.binary == "":
		return stage{}, fmt.Errorf("%s: the final stage needs USER, ENTRYPOINT and COPY of the binary", path)
	case st.entrypoint[0] != "/"+st.binary:
		return stage{}, fmt.Errorf("%s: ENTRYPOINT %q does not run the copied binary /%s", path, st.entrypoint, st.binary)
	}
	return st, nil
}

// parseLabels parses LABEL's key="value" pairs into into.
func parseLabels(s string, into map[string]string) error {
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return errors.New("want key=\"value\" pairs")
		}
		if !strings.HasPrefix(rest, `"`) {
			v, tail, _ := strings.Cut(rest, " ")
			into[key], s = v, tail
			continue
		}
		v, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return fmt.Errorf("value of %s: %w", key, err)
		}
		if into[key], err = strconv.Unquote(v); err != nil {
			return err
		}
		s = rest[len(v):]
	}
	return nil
}

// source describes the commit being built.
type source = buildsource.Source

// sourceInfo reads the version, revision and commit time from hack/version.sh, the one source of
// certapi's version (git describe, or $VERSION).
func sourceInfo() (source, error) { return buildsource.Read() }

// buildImage puts the binary into an empty base with the stage's configuration.
func buildImage(bin, arch string, st stage, minimal bool, src source) (v1.Image, error) {
	layerTar, err := rootfsLayer(bin, st.binary, minimal, src.Time)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: src.Time}, CreatedBy: "hack/image: COPY " + filepath.Base(st.binary) + " /" + st.binary, Comment: "built with go-containerregistry",
	}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = arch, "linux", v1.Time{Time: src.Time}
	labels := map[string]string{labelVersion: src.Version, labelCreated: src.Time.Format(time.RFC3339)}
	if src.Commit != "" {
		labels[labelRevision] = src.Commit
	}
	for k, v := range st.labels {
		labels[k] = v
	}
	ports := map[string]struct{}{}
	for _, p := range st.ports {
		ports[p] = struct{}{}
	}
	cf.Config = v1.Config{
		User:         st.user,
		Entrypoint:   st.entrypoint,
		ExposedPorts: ports,
		Labels:       labels,
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir:   "/",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image configuration: %w", err)
	}
	return img, nil
}

// rootfsLayer is the image's one layer: the binary at dest (mode 0755, owned by root, so the non-root
// user cannot replace it) and the directories above it; unless minimal, also /tmp (1777) and /etc/passwd
// and /etc/group naming root and the user the images run as (65532, "nonroot", as distroless has them).
func rootfsLayer(bin, dest string, minimal bool, mtime time.Time) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"etc/": true, "tmp/": true}
	if minimal {
		dirs = map[string]bool{}
	}
	for d := filepath.Dir(dest); d != "." && d != "/"; d = filepath.Dir(d) {
		dirs[d+"/"] = true
	}
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for d := range dirs {
			if !yield(d) {
				return
			}
		}
	}) {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	type file struct {
		name string
		mode int64
		data []byte
	}
	files := []file{
		{"etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{dest, 0o755, data},
	}
	if minimal {
		files = []file{{dest, 0o755, data}}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img as an OCI image layout into dir, then tars dir with a docker-archive
// manifest.json into out.
func writeArchive(out, dir string, img v1.Image, tag string, mtime time.Time) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	refName := tag
	if _, t, ok := strings.Cut(lastPathElement(tag), ":"); ok {
		refName = t
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": refName,
		"io.containerd.image.name":          fullyQualified(tag),
	})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: "blobs/sha256/" + cfg.Hex, RepoTags: []string{tag}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		entry.Layers = append(entry.Layers, "blobs/sha256/"+d.Hex)
	}
	manifest, err := json.Marshal([]any{entry})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// Written beside out and renamed over it: a reader (ctr images import) sees the old archive or the
	// new one, never half of one.
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	if err := buildsource.TarDir(tmp, dir, mtime); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

func lastPathElement(ref string) string {
	return ref[strings.LastIndex(ref, "/")+1:]
}

// fullyQualified is the name containerd (and so docker load of an OCI archive) expects: certapi:dev is
// docker.io/library/certapi:dev.
func fullyQualified(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	}
	return ref
}
