package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
