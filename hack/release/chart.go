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
// v, appVersion with it), then renders the packaged chart's defaults into the install YAML with the image
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
	if _, err := helm("package", filepath.Join("artifacts", "charts", "certapi"), "--version", chartVersion, "--app-version", src.Version, "--destination", o.output); err != nil {
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
	rendered, err := helm("template", "certapi", tgz, "--namespace", ns, "--set", "image.digest="+digest.String())
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
