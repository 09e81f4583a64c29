package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadFinalStage(t *testing.T) {
	st, err := readFinalStage(filepath.Join("..", "..", "artifacts", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatalf("the project's Dockerfile: %v", err)
	}
	if st.user != "65532:65532" || !slices.Equal(st.entrypoint, []string{"/usr/local/bin/certapi"}) || st.binary != "usr/local/bin/certapi" ||
		!slices.Equal(st.ports, []string{"8443/tcp"}) || st.labels["org.opencontainers.image.title"] != "certapi" {
		t.Fatalf("the project's Dockerfile: %+v", st)
	}

	for _, tc := range []struct {
		name, final string
		wantErr     string
		labels      map[string]string
	}{
		{name: "labels, continued lines, unquoted values",
			final:  "LABEL a=\"x y\" \\\n  b=\"q\\\"uote\" c=plain\nCOPY --from=b /out/certapi /bin/certapi\nUSER 1:1\nENTRYPOINT [\"/bin/certapi\"]",
			labels: map[string]string{"a": "x y", "b": `q"uote`, "c": "plain"}},
		{name: "an instruction it does not know", final: "RUN true\nUSER 1\nENTRYPOINT [\"/x\"]", wantErr: "does not know RUN"},
		{name: "shell-form entrypoint", final: "COPY --from=b /out/certapi /certapi\nUSER 1\nENTRYPOINT /certapi", wantErr: "exec form"},
		{name: "entrypoint of another file", final: "COPY --from=b /out/certapi /certapi\nUSER 1\nENTRYPOINT [\"/other\"]", wantErr: "does not run the copied binary"},
		{name: "no user", final: "COPY --from=b /out/certapi /certapi\nENTRYPOINT [\"/certapi\"]", wantErr: "needs USER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "Dockerfile")
			data := "# comment\nFROM golang AS b\nRUN go build\n\nFROM scratch\n" + tc.final + "\n"
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := readFinalStage(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(st.labels, tc.labels) {
				t.Fatalf("labels %v, want %v", st.labels, tc.labels)
			}
		})
	}
}

func TestFullyQualified(t *testing.T) {
	for in, want := range map[string]string{
		"certapi:dev":              "docker.io/library/certapi:dev",
		"me/certapi:v1":            "docker.io/me/certapi:v1",
		"ghcr.io/me/certapi:v1":    "ghcr.io/me/certapi:v1",
		"localhost/certapi:v1":     "localhost/certapi:v1",
		"registry:5000/certapi:v1": "registry:5000/certapi:v1",
	} {
		if got := fullyQualified(in); got != want {
			t.Errorf("fullyQualified(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWebhookDockerfile(t *testing.T) {
	st, err := readFinalStage(filepath.Join("..", "..", "artifacts", "examples", "webhook", "Dockerfile"))
	if err != nil {
		t.Fatalf("the example webhook's Dockerfile: %v", err)
	}
	if st.user != nonroot || !slices.Equal(st.entrypoint, []string{"/usr/local/bin/example-webhook"}) || st.binary != "usr/local/bin/example-webhook" ||
		!slices.Equal(st.ports, []string{"9443/tcp", "8081/tcp"}) || st.labels[labelTitle] != "certapi-example-webhook" {
		t.Fatalf("the example webhook's Dockerfile: %+v", st)
	}
}

func TestJobs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       options
		want    []job
		wantErr string
	}{
		{name: "make image: certapi, named by its version", o: options{image: "certapi", outputDir: "out"},
			want: []job{{out: filepath.Join("_output", "certapi-image.tar"), tag: "certapi:1.2.3-4-gabc"}}},
		{name: "certapi with a tag and an output", o: options{image: "certapi", output: "x.tar", tag: "r/c:1", outputDir: "out"},
			want: []job{{out: "x.tar", tag: "r/c:1"}}},
		{name: "pause alone: its fixed name, in the output directory", o: options{image: "pause", outputDir: "out"},
			want: []job{{out: filepath.Join("out", "pause.tar"), tag: "certapi.dev/pause:3.10"}}},
		{name: "make images", o: options{all: true, outputDir: "out"}, want: []job{
			{out: filepath.Join("out", "certapi.tar"), tag: "certapi.dev/certapi:dev"},
			{out: filepath.Join("out", "example-webhook.tar"), tag: "certapi.dev/example-webhook:dev"},
			{out: filepath.Join("out", "pause.tar"), tag: "certapi.dev/pause:3.10"},
			{out: filepath.Join("out", "coredns.tar"), tag: "certapi.dev/coredns:dev"},
		}},
		{name: "an unknown image", o: options{image: "nginx"}, wantErr: "want one of certapi, example-webhook, pause, coredns"},
		{name: "--all with a tag", o: options{all: true, tag: "x:y"}, wantErr: "--all writes every image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, err := tc.o.jobs("v1.2.3-4-gabc")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []job
			for _, j := range js {
				got = append(got, job{out: j.out, tag: j.tag})
			}
			if !slices.EqualFunc(got, tc.want, func(a, b job) bool { return a.out == b.out && a.tag == b.tag }) {
				t.Fatalf("jobs %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRootfsLayer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dest    string
		minimal bool
		want    []string
	}{
		{dest: "pause", minimal: true, want: []string{"pause"}},
		{dest: "usr/local/bin/certapi", want: []string{"etc/", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "etc/group", "etc/passwd", "usr/local/bin/certapi"}},
	} {
		data, err := rootfsLayer(bin, tc.dest, tc.minimal, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Uid != 0 || hdr.Gid != 0 {
				t.Errorf("%s owned by %d:%d, want root", hdr.Name, hdr.Uid, hdr.Gid)
			}
			names = append(names, hdr.Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("layer of %s (minimal %t): %v, want %v", tc.dest, tc.minimal, names, tc.want)
		}
	}
}
