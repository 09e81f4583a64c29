package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fileFromTarGz is the content of the file name in the gzipped tar archive path.
func fileFromTarGz(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s has no %s", path, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if h.Name == name {
			return io.ReadAll(tr)
		}
	}
}

// InstallYAML is the release's install manifest: the chart's default install, rendered, image pinned by
// digest, with its namespace.
const InstallYAML = "certapi.yaml"

// releaseChart packages artifacts/charts/certapi with the release's version (chart version without the
// v, appVersion with it) and its image pinned by digest by default (pinnedChart), then renders the packaged chart's defaults into the install YAML with the image
// index's digest.
func releaseChart(o options, src source, digest v1.Hash, k *keys) error {
	chartVersion := strings.TrimPrefix(src.Version, "v")
	helm := func(args ...string) ([]byte, error) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(o.helm, args...)
		// helm reads no configuration or repository of the user's.
		home, err := os.MkdirTemp(o.work, "helm-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(home)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.Bytes(), nil
	}
	if _, err := os.Stat(o.helm); err != nil {
		return fmt.Errorf("helm: %w (run `make tools`, or hack/build-tools.sh helm)", err)
	}
	chartDir, err := pinnedChart(o.work, digest)
	if err != nil {
		return err
	}
	if _, err := helm("package", chartDir, "--version", chartVersion, "--app-version", src.Version, "--destination", o.output); err != nil {
		return err
	}
	tgz := filepath.Join(o.output, "certapi-"+chartVersion+".tgz")
	if err := normalizeTarGz(tgz, src.Time); err != nil {
		return err
	}
	chartYAML, err := fileFromTarGz(tgz, "certapi/Chart.yaml")
	if err != nil {
		return err
	}
	if err := k.writeHelmProvenance(tgz, chartYAML, src.Time); err != nil {
		return fmt.Errorf("the chart's provenance file: %w", err)
	}
	const ns = "certapi-system"
	// The packaged chart's defaults: they pin the image by digest.
	rendered, err := helm("template", "certapi", tgz, "--namespace", ns)
	if err != nil {
		return err
	}
	if !bytes.Contains(rendered, []byte(imageRepository+"@"+digest.String())) {
		return fmt.Errorf("the rendered chart does not pull %s@%s", imageRepository, digest)
	}
	head := fmt.Sprintf(`# certapi %s: the Helm chart's default install (helm template certapi certapi-%s.tgz --namespace %s),
# the image pinned by digest. kubectl apply --server-side -f %s
apiVersion: v1
kind: Namespace
metadata:
  name: %s
`, src.Version, chartVersion, ns, InstallYAML, ns)
	return os.WriteFile(filepath.Join(o.output, InstallYAML), append([]byte(head), rendered...), 0o644)
}

// pinnedChart copies artifacts/charts/certapi into work with the default image.digest set to the release's
// image index: an install of the packaged chart with its defaults pulls exactly the release's image, which
// a moved tag cannot change. It returns the copy's directory.
func pinnedChart(work string, digest v1.Hash) (string, error) {
	dir := filepath.Join(work, "chart", "certapi")
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("artifacts", "charts", "certapi"))); err != nil {
		return "", fmt.Errorf("copying the chart: %w", err)
	}
	values := filepath.Join(dir, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		return "", err
	}
	pinned, err := pinImageDigest(data, digest.String())
	if err != nil {
		return "", fmt.Errorf("%s: %w", values, err)
	}
	return dir, os.WriteFile(values, pinned, 0o644)
}

// pinImageDigest sets image.digest, the first `  digest: ""` under the top-level `image:` of the chart's
// values.yaml, to digest, keeping every comment and the order of the file.
func pinImageDigest(source []byte, digest string) ([]byte, error) {
	// A newline in front, so that a key on the first line starts one too.
	values := append([]byte("\n"), source...)
	start := bytes.Index(values, []byte("\nimage:\n"))
	if start < 0 {
		return nil, fmt.Errorf("no top-level image: key")
	}
	end := len(values)
	// The image block ends at the next top-level key.
	for i := start + len("\nimage:\n"); i < len(values); {
		nl := bytes.IndexByte(values[i:], '\n')
		if nl < 0 {
			break
		}
		if line := values[i : i+nl]; len(line) > 0 && line[0] != ' ' && line[0] != '#' {
			end = i
			break
		}
		i += nl + 1
	}
	const unset = "\n  digest: \"\"\n"
	at := bytes.Index(values[start:end], []byte(unset))
	if at < 0 {
		return nil, fmt.Errorf(`no image.digest: "" to pin (it must stay empty in the source chart)`)
	}
	at += start
	out := append([]byte{}, values[:at]...)
	out = append(out, fmt.Sprintf("\n  digest: %q\n", digest)...)
	return append(out, values[at+len(unset):]...)[1:], nil
}
