// Package matrix is the version matrix of `make test-matrix`: which tests show each feature of certapi
// (Features), what one run against one Kubernetes minor found (Results, written by hack/matrix into
// docs/matrix/), and the supported-versions table of docs/install.md that hack/docgen writes from those
// results (Table).
package matrix

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/certapi/certapi/test/testhelpers"
)

// Module is certapi's module path; the packages below are under it.
const Module = "github.com/certapi/certapi"

// ResultsDir holds one results file per Kubernetes minor, kubernetes-<minor>.json, relative to the
// repository's root.
const ResultsDir = "docs/matrix"

// NotServedPrefix starts the skip message of a test whose API the minor does not serve
// (testhelpers.SkipUnlessServed): the table shows its feature as off, not failing.
const NotServedPrefix = testhelpers.NotServedPrefix

// Test names one test function of one package (relative to Module).
type Test struct {
	Package string `json:"package"`
	Name    string `json:"name"`
}

// Feature is one thing certapi does, shown by the tests that the matrix runs for it.
type Feature struct {
	Name  string
	Tests []Test
}

func tests(pkg string, names ...string) []Test {
	var out []Test
	for _, n := range names {
		out = append(out, Test{Package: pkg, Name: n})
	}
	return out
}

// Features are the core end-to-end cases of the matrix, in the order of the table.
var Features = []Feature{
	{Name: "Synchronous issuance (`servingcerts`)", Tests: tests("test/e2e",
		"TestServingCertIsTrustedThroughTheBundle", "TestServingCertDryRunAndDuration", "TestServingCertBadInput")},
	{Name: "Secret delivery and renewal", Tests: tests("test/e2e", "TestSecretDelivery", "TestSecretRenewal")},
	{Name: "caBundle injection: webhook configurations, CRDs, APIServices, ConfigMaps", Tests: slices.Concat(
		tests("test/e2e", "TestAdmissionWebhookTrustedThroughInjection", "TestCRDConversionWebhook", "TestCertapiAPIServiceSelfInjected"),
		tests("test/integration/injector", "TestWebhookConfigurations", "TestCustomResourceDefinitions", "TestAPIServices", "TestConfigMaps"))},
	{Name: "CA rotation and distrust", Tests: tests("test/e2e", "TestForcedRotationRunsToTheEnd", "TestDistrustReplacesTheCAAtOnce")},
	{Name: "ClusterTrustBundle `certapi.dev:serving:ca`", Tests: tests("test/integration/trustbundle", "TestClusterTrustBundle")},
	{Name: "Pod certificates (PodCertificateRequest signer `certapi.dev/serving`)", Tests: tests("test/e2e",
		"TestPodCertificates", "TestPodCertificatesThroughRotation")},
	{Name: "Missing APIs reported (`APIsServed`, `certapi_kube_api_served`, `kubectl certapi status`)", Tests: tests("test/e2e", "TestServedAPIsAreReported")},
	{Name: "kubectl plugins (`kubectl create servingcertrequest`, `kubectl certapi`) through that minor's kubectl", Tests: tests("test/e2e", "TestPlugin", "TestKubectlCertapi")},
	{Name: "Deploy manifests (kustomize) applied with a server-side dry run; admission policies enforced", Tests: tests("test/e2e/manifests",
		"TestManifests", "TestManifestsRBACRunsCertapi")},
	{Name: "Helm chart rendered and applied (server-side dry run), installed and uninstalled", Tests: tests("test/chart",
		"TestKubeVersion", "TestClusterTrustBundlePolicyFollowsTheCluster", "TestExamples", "TestValues", "TestInstallAndUninstall")},
}

// Packages returns every package the features' tests are in, each with a `go test -run` pattern of
// exactly its tests, in a fixed order.
func Packages(features []Feature) (pkgs []string, run map[string]string) {
	names := map[string][]string{}
	for _, f := range features {
		for _, t := range f.Tests {
			if !slices.Contains(names[t.Package], t.Name) {
				names[t.Package] = append(names[t.Package], t.Name)
			}
		}
	}
	run = map[string]string{}
	for p, n := range names {
		pkgs = append(pkgs, p)
		run[p] = "^(" + strings.Join(n, "|") + ")$"
	}
	slices.Sort(pkgs)
	return pkgs, run
}

// Outcome is one test's result.
type Outcome string

// Outcomes of a test, as `go test -json` reports them.
const (
	Pass Outcome = "pass"
	Fail Outcome = "fail"
	Skip Outcome = "skip"
)

// TestResult is one test of one run.
type TestResult struct {
	Test
	Result  Outcome `json:"result"`
	Seconds float64 `json:"seconds"`
	// Message is a skipped test's reason (its last output line before the skip).
	Message string `json:"message,omitempty"`
	// NotServed are its subtests skipped because the minor does not serve an API, "<subtest>: <reason>" (a
	// passing test with some left out, e.g. one example of several that needs a newer Kubernetes).
	NotServed []string `json:"notServed,omitempty"`
}

// Results is what one run of the matrix against one Kubernetes minor found.
type Results struct {
	// Minor is the Kubernetes minor, e.g. "1.33"; Kubernetes the version of kube-apiserver and kubectl.
	Minor      string `json:"minor"`
	Kubernetes string `json:"kubernetes"`
	// Certapi is the version of certapi tested (hack/version.sh), Date the day of the run.
	Certapi string `json:"certapi"`
	Date    string `json:"date"`
	// Seconds is how long the tests took, end to end.
	Seconds float64      `json:"seconds"`
	Tests   []TestResult `json:"tests"`
}

// event is a line of `go test -json`.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// ParseTestJSON reads the output of `go test -json` and returns the result of each top-level test, in
// the order they ended, with package names relative to Module. A package that failed without running a
// test (it did not build, TestMain failed) is one failed test named after the package.
func ParseTestJSON(r io.Reader) ([]TestResult, error) {
	var out []TestResult
	lastLine := map[string]string{}
	ran := map[string]bool{}
	notServed := map[string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 || line[0] != '{' {
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("parsing go test -json: %w", err)
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(e.Package, Module), "/")
		if e.Test == "" {
			if e.Action == "fail" && !ran[pkg] {
				out = append(out, TestResult{Test: Test{Package: pkg, Name: "(package " + pkg + ")"}, Result: Fail, Seconds: e.Elapsed})
			}
			continue
		}
		key := pkg + "." + e.Test
		if top, path, sub := strings.Cut(e.Test, "/"); sub {
			switch e.Action {
			case "output":
				if s := strings.TrimSpace(e.Output); s != "" && !strings.HasPrefix(s, "---") && !strings.HasPrefix(s, "=== ") {
					lastLine[key] = s
				}
			case "skip":
				if m := skipMessage(lastLine[key]); strings.HasPrefix(m, NotServedPrefix) {
					notServed[pkg+"."+top] = append(notServed[pkg+"."+top], path+": "+strings.TrimPrefix(m, NotServedPrefix))
				}
			}
			continue
		}
		switch e.Action {
		case "output":
			if s := strings.TrimSpace(e.Output); s != "" && !strings.HasPrefix(s, "---") && !strings.HasPrefix(s, "=== ") {
				lastLine[key] = s
			}
		case "pass", "fail", "skip":
			ran[pkg] = true
			tr := TestResult{Test: Test{Package: pkg, Name: e.Test}, Result: Outcome(e.Action), Seconds: e.Elapsed}
			if tr.Result == Skip {
				tr.Message = skipMessage(lastLine[key])
			}
			tr.NotServed = notServed[key]
			out = append(out, tr)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading go test -json: %w", err)
	}
	return out, nil
}

// skipMessage strips the "file_test.go:12: " prefix go test puts before t.Skip's message.
func skipMessage(line string) string {
	if i := strings.Index(line, ": "); i > 0 && strings.Contains(line[:i], "_test.go:") {
		return line[i+2:]
	}
	return line
}

// Cell is what the table says of one feature on one minor.
type Cell struct {
	// Status: "tested" (every test passed), "off" (every test that did not pass was skipped because the
	// minor does not serve an API certapi needs for it), "FAILS" (a test failed) or "not run".
	Status string
	// Note says what is off and why, or which tests failed.
	Note string
}

// Summarize says what the results of one minor show of feature f.
func Summarize(f Feature, r Results) Cell {
	byTest := map[Test]TestResult{}
	for _, t := range r.Tests {
		byTest[t.Test] = t
	}
	var failed, missing, notServed, partly []string
	passed := 0
	for _, t := range f.Tests {
		res, ok := byTest[t]
		switch {
		case !ok:
			missing = append(missing, t.Name)
		case res.Result == Pass:
			passed++
			partly = append(partly, res.NotServed...)
		case res.Result == Skip && strings.HasPrefix(res.Message, NotServedPrefix):
			notServed = append(notServed, strings.TrimPrefix(res.Message, NotServedPrefix))
		default:
			failed = append(failed, t.Name)
		}
	}
	// A package that failed as a whole fails each of its tests that did not end.
	for _, t := range r.Tests {
		if strings.HasPrefix(t.Name, "(package ") && t.Result == Fail {
			for _, ft := range f.Tests {
				if ft.Package == t.Package && slices.Contains(missing, ft.Name) {
					failed = append(failed, ft.Name)
					missing = slices.DeleteFunc(missing, func(n string) bool { return n == ft.Name })
				}
			}
		}
	}
	switch {
	case len(failed) > 0:
		return Cell{Status: "FAILS", Note: strings.Join(failed, ", ")}
	case passed == 0 && len(notServed) > 0:
		slices.Sort(notServed)
		return Cell{Status: "off", Note: strings.Join(slices.Compact(notServed), "; ")}
	case len(missing) > 0 || passed == 0:
		return Cell{Status: "not run"}
	case len(notServed) > 0 || len(partly) > 0:
		all := slices.Concat(notServed, partly)
		slices.Sort(all)
		return Cell{Status: "partly off", Note: strings.Join(slices.Compact(all), "; ")}
	}
	return Cell{Status: "tested"}
}

// ReadResults reads every results file of dir (kubernetes-<minor>.json), oldest minor first.
func ReadResults(dir string) ([]Results, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "kubernetes-*.json"))
	if err != nil {
		return nil, err
	}
	var out []Results
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		var r Results
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", p, err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Results) int { return compareMinor(a.Minor, b.Minor) })
	return out, nil
}

// compareMinor orders "1.33" before "1.37" (and "1.9" before "1.10").
func compareMinor(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return len(pa) - len(pb)
}

// Table is the supported-versions table: a row per feature, a column per minor that the matrix ran, and
// under it what each off or failing cell means and which run each column is from.
func Table(features []Feature, results []Results) []byte {
	var b bytes.Buffer
	if len(results) == 0 {
		b.WriteString("No results yet: run `make test-matrix`.\n")
		return b.Bytes()
	}
	b.WriteString("| feature |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.Minor)
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	type note struct{ minor, feature, text string }
	var notes []note
	for _, f := range features {
		fmt.Fprintf(&b, "| %s |", f.Name)
		for _, r := range results {
			c := Summarize(f, r)
			mark := c.Status
			if c.Note != "" {
				notes = append(notes, note{r.Minor, f.Name, c.Note})
				mark += fmt.Sprintf(" [%d]", len(notes))
			}
			fmt.Fprintf(&b, " %s |", mark)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for i, n := range notes {
		fmt.Fprintf(&b, "%d. %s, %s: %s\n", i+1, n.minor, n.feature, n.text)
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("Each column is one run of `make test-matrix`:\n\n")
	for _, r := range results {
		fmt.Fprintf(&b, "- %s: kube-apiserver and kubectl %s, certapi %s, %s; %d tests in %s\n",
			r.Minor, r.Kubernetes, r.Certapi, r.Date, len(r.Tests), (time.Duration(r.Seconds) * time.Second).String())
	}
	return b.Bytes()
}
