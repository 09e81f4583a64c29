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
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

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
	binSum, err := buildsource.FileSHA256(bin)
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
