// Command matrix runs certapi's core end-to-end cases (hack/internal/matrix.Features) against each
// Kubernetes minor named: it builds that minor's kube-apiserver and kubectl (hack/build-tools.sh
// kube-<minor>, or kube for the minor of hack/tools), runs each package's tests with `go test -json
// -run` and KUBE_MINOR set (test/framework then starts that kube-apiserver and the tests run that
// kubectl), and writes what it found to docs/matrix/kubernetes-<minor>.json, from which hack/docgen
// writes the supported-versions table of docs/install.md. `make test-matrix MINORS="1.33 1.37"` runs it.
// It exits non-zero when a test failed; the results are written regardless.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/certapi/certapi/hack/internal/matrix"
)

func main() {
	root := flag.String("root", ".", "The repository's root directory.")
	minors := flag.String("minors", "", `The Kubernetes minors to run, separated by spaces, e.g. "1.33 1.37".`)
	timeout := flag.Duration("timeout", 40*time.Minute, "go test -timeout of each package.")
	results := flag.String("results", matrix.ResultsDir, "Where kubernetes-<minor>.json is written, relative to -root. "+
		"make test runs the oldest minor with _output/matrix, so that a test run leaves docs/matrix (what make docs reads) as it was.")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, *root, *results, strings.Fields(*minors), *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

func run(ctx context.Context, root, results string, minors []string, timeout time.Duration) (failed bool, err error) {
	if len(minors) == 0 {
		return false, fmt.Errorf(`no minor named: -minors "1.33 1.37"`)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return false, err
	}
	current, _, err := moduleKubernetes(filepath.Join(root, "hack", "tools"))
	if err != nil {
		return false, err
	}
	certapi, err := certapiVersion(ctx, root)
	if err != nil {
		return false, err
	}
	for _, minor := range minors {
		if !regexp.MustCompile(`^1\.[0-9]+$`).MatchString(minor) {
			return false, fmt.Errorf("minor %q: want e.g. 1.33", minor)
		}
		r, err := runMinor(ctx, root, results, minor, minor == current, certapi, timeout)
		if err != nil {
			return false, err
		}
		var pass, fail, skip int
		for _, t := range r.Tests {
			switch t.Result {
			case matrix.Pass:
				pass++
			case matrix.Fail:
				fail++
				fmt.Printf("FAIL %s (Kubernetes %s): %s.%s\n", minor, r.Kubernetes, t.Package, t.Name)
			case matrix.Skip:
				skip++
				fmt.Printf("skip %s (Kubernetes %s): %s.%s: %s\n", minor, r.Kubernetes, t.Package, t.Name, t.Message)
			}
		}
		failed = failed || fail > 0
		fmt.Printf("Kubernetes %s (%s): %d passed, %d failed, %d skipped in %s\n", minor, r.Kubernetes, pass, fail, skip, time.Duration(r.Seconds)*time.Second)
	}
	return failed, nil
}

// runMinor builds minor's tools and runs every package's tests against them.
func runMinor(ctx context.Context, root, results, minor string, current bool, certapi string, timeout time.Duration) (matrix.Results, error) {
	module, group := filepath.Join(root, "hack", "tools"), "kube"
	env := os.Environ()
	if !current {
		module, group = filepath.Join(root, "hack", "tools", "kube-"+minor), "kube-"+minor
		env = append(env, "KUBE_MINOR="+minor)
	} else {
		env = append(env, "KUBE_MINOR=")
	}
	_, version, err := moduleKubernetes(module)
	if err != nil {
		return matrix.Results{}, fmt.Errorf("Kubernetes %s: %w (write its module with hack/tools/new-kube-minor.sh)", minor, err)
	}
	// etcd and helm come from `make tools`' own groups whatever the minor.
	build := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-tools.sh"), "kube", "helm", group)
	build.Dir, build.Stdout, build.Stderr = root, os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return matrix.Results{}, fmt.Errorf("building the tools of Kubernetes %s: %w", minor, err)
	}

	out := filepath.Join(root, "_output", "matrix", minor)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return matrix.Results{}, err
	}
	r := matrix.Results{Minor: minor, Kubernetes: version, Certapi: certapi, Date: time.Now().UTC().Format("2006-01-02")}
	start := time.Now()
	pkgs, runs := matrix.Packages(matrix.Features)
	for _, pkg := range pkgs {
		fmt.Printf("Kubernetes %s (%s): go test ./%s -run '%s'\n", minor, version, pkg, runs[pkg])
		raw := filepath.Join(out, strings.ReplaceAll(pkg, "/", "_")+".json")
		f, err := os.Create(raw)
		if err != nil {
			return matrix.Results{}, err
		}
		var buf bytes.Buffer
		cmd := exec.CommandContext(ctx, "go", "test", "-json", "-count=1", "-p", "1", "-timeout", timeout.String(), "./"+pkg, "-run", runs[pkg])
		cmd.Dir, cmd.Env = root, env
		cmd.Stdout, cmd.Stderr = io.MultiWriter(f, &buf), os.Stderr
		runErr := cmd.Run()
		f.Close()
		if ctx.Err() != nil {
			return matrix.Results{}, ctx.Err()
		}
		var exit *exec.ExitError
		if runErr != nil && !errors.As(runErr, &exit) {
			return matrix.Results{}, fmt.Errorf("go test ./%s: %w", pkg, runErr)
		}
		tests, err := matrix.ParseTestJSON(&buf)
		if err != nil {
			return matrix.Results{}, fmt.Errorf("%s: %w", raw, err)
		}
		if runErr != nil && len(tests) == 0 {
			tests = append(tests, matrix.TestResult{Test: matrix.Test{Package: pkg, Name: "(package " + pkg + ")"}, Result: matrix.Fail})
		}
		r.Tests = append(r.Tests, tests...)
		printFailures(os.Stdout, minor, buf.Bytes(), tests)
		fmt.Printf("Kubernetes %s: ./%s done; its go test -json output is in %s\n", minor, pkg, raw)
	}
	r.Seconds = time.Since(start).Round(time.Second).Seconds()
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return matrix.Results{}, err
	}
	path := filepath.Join(root, results, "kubernetes-"+minor+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return matrix.Results{}, err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return matrix.Results{}, err
	}
	fmt.Printf("Kubernetes %s: results in %s (`make docs` writes the table of docs/install.md from them)\n", minor, path)
	return r, nil
}

// printFailures prints, for each failed test of tests, the messages its test files logged (the
// "x_test.go:12: ..." lines of its go test -json output), so that a failure is readable where the run is
// read and not only in the JSON files.
func printFailures(w io.Writer, minor string, goTestJSON []byte, tests []matrix.TestResult) {
	failed := map[string]bool{}
	for _, t := range tests {
		if t.Result == matrix.Fail {
			failed[t.Name] = true
		}
	}
	if len(failed) == 0 {
		return
	}
	message := regexp.MustCompile(`^\s*[A-Za-z0-9_]+_test\.go:[0-9]+: `)
	// A package that failed as a whole (TestMain, a build) has no test to name: the last lines it
	// printed outside any test say why.
	var packageTail []string
	for _, line := range bytes.Split(goTestJSON, []byte("\n")) {
		var e struct{ Action, Package, Test, Output string }
		if json.Unmarshal(line, &e) != nil || e.Action != "output" {
			continue
		}
		if e.Test == "" {
			pkg := strings.TrimPrefix(strings.TrimPrefix(e.Package, matrix.Module), "/")
			if s := strings.TrimSpace(e.Output); failed["(package "+pkg+")"] && s != "" {
				packageTail = append(packageTail, s)
			}
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		if failed[top] && message.MatchString(e.Output) {
			fmt.Fprintf(w, "FAIL %s: %s: %s", minor, e.Test, strings.TrimLeft(e.Output, " \t"))
		}
	}
	for _, s := range packageTail[max(0, len(packageTail)-packageTailLines):] {
		fmt.Fprintf(w, "FAIL %s: (package): %s\n", minor, s)
	}
}

// packageTailLines is how many of a failed package's last lines outside any test printFailures
// repeats: enough for TestMain's error and the end of the logs it prints.
const packageTailLines = 15

// moduleKubernetes returns the minor and version of k8s.io/kubernetes that the tools module in dir requires.
func moduleKubernetes(dir string) (minor, version string, err error) {
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", "", err
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v1\.([0-9]+)\.[0-9]+)\s*$`).FindSubmatch(data)
	if m == nil {
		return "", "", fmt.Errorf("%s/go.mod requires no k8s.io/kubernetes release", dir)
	}
	return "1." + string(m[2]), string(m[1]), nil
}

// certapiVersion is hack/version.sh's VERSION.
func certapiVersion(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "version.sh"))
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/version.sh: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("hack/version.sh printed no VERSION")
}
