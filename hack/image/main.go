// Command image builds certapi's container image without a Docker engine (make image): a static certapi
// (CGO_ENABLED=0, built as artifacts/deploy/Dockerfile builds it) in an empty base, as an image archive
// that `docker load`, `podman load` and `crane push` accept. The archive holds the image twice over the
// same blobs, as `docker save` has since Docker 25: an OCI image layout (oci-layout, index.json,
// blobs/sha256/...) and the manifest.json of the older docker-archive format.
//
// The user, entrypoint, exposed port, labels and the binary's path come from the final stage of
// artifacts/deploy/Dockerfile, so the two ways of building cannot drift apart. Only
// go-containerregistry (pure Go) is used; nothing runs in a container.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Labels hack/image adds to the Dockerfile's, from the source it builds.
const (
	labelVersion  = "org.opencontainers.image.version"
	labelRevision = "org.opencontainers.image.revision"
)

func main() {
	out := flag.String("output", filepath.Join("_output", "certapi-image.tar"), "Where to write the image archive.")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the image (its OS is linux).")
	tag := flag.String("tag", "", "The image's name and tag in the archive. Default: certapi:<version>.")
	dockerfile := flag.String("dockerfile", filepath.Join("artifacts", "deploy", "Dockerfile"), "The Dockerfile whose final stage gives the user, entrypoint, port, labels and binary path.")
	flag.Parse()
	if err := run(*out, *arch, *tag, *dockerfile); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(out, arch, tag, dockerfile string) error {
	start := time.Now()
	stage, err := readFinalStage(dockerfile)
	if err != nil {
		return err
	}
	src := sourceInfo()
	if tag == "" {
		tag = "certapi:" + strings.TrimPrefix(src.version, "v")
	}
	work, err := os.MkdirTemp("", "certapi-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	bin := filepath.Join(work, "certapi")
	if err := buildBinary(bin, arch, src.version); err != nil {
		return err
	}
	img, err := buildImage(bin, arch, stage, src)
	if err != nil {
		return err
	}
	if err := writeArchive(out, filepath.Join(work, "layout"), img, tag, src.time); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s (linux/%s, %s) in %s\n", out, tag, arch, digest, time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("load it with `docker load -i %s` or `podman load -i %s`; push it with `crane push %s REGISTRY/certapi:TAG`\n", out, out, out)
	return nil
}

// stage is what the Dockerfile's final stage says about the image.
type stage struct {
	user       string
	entrypoint []string
	ports      []string
	labels     map[string]string
	// binary is where the final stage copies the certapi binary.
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
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") || filepath.Base(f[1]) != "certapi" {
				return stage{}, fmt.Errorf("%s: COPY %s: want COPY --from=STAGE .../certapi DEST", path, rest)
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
type source struct {
	version, revision string
	// time is the commit's time, the image's creation time and every file's: the same commit gives the
	// same image.
	time time.Time
}

// sourceInfo reads the version (git describe), revision and commit time; outside a git work tree,
// "dev" and the Unix epoch.
func sourceInfo() source {
	s := source{version: "dev", time: time.Unix(0, 0).UTC()}
	git := func(args ...string) string {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	if v := git("describe", "--tags", "--always", "--dirty"); v != "" {
		s.version = v
	}
	s.revision = git("rev-parse", "HEAD")
	if ct, err := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64); err == nil {
		s.time = time.Unix(ct, 0).UTC()
	}
	return s
}

// buildBinary builds certapi as the Dockerfile does: static, trimmed paths, no symbol table.
func buildBinary(out, arch, version string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X main.version="+version, "-o", out, "./cmd/certapi")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building certapi for linux/%s: %w", arch, err)
	}
	return nil
}

// buildImage puts the binary into an empty base with the stage's configuration.
func buildImage(bin, arch string, st stage, src source) (v1.Image, error) {
	layerTar, err := rootfsLayer(bin, st.binary, src.time)
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
		Created: v1.Time{Time: src.time}, CreatedBy: "hack/image: COPY certapi /" + st.binary, Comment: "built with go-containerregistry",
	}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = arch, "linux", v1.Time{Time: src.time}
	labels := map[string]string{labelVersion: src.version}
	if src.revision != "" {
		labels[labelRevision] = src.revision
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
// user cannot replace it), the directories above it, /tmp (1777) and /etc/passwd and /etc/group naming
// root and the user the Dockerfile runs as (65532, "nonroot", as distroless has them).
func rootfsLayer(bin, dest string, mtime time.Time) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"etc/": true, "tmp/": true}
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
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{dest, 0o755, data},
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
	tmp := out + ".tmp"
	if err := tarDir(tmp, dir, mtime); err != nil {
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

// tarDir writes the files under dir into the tar file out, sorted, with fixed times and owners.
func tarDir(out, dir string, mtime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}
