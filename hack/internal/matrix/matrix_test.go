package matrix

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTestJSON(t *testing.T) {
	const out = `{"Action":"start","Package":"github.com/certapi/certapi/test/e2e"}
{"Action":"run","Package":"github.com/certapi/certapi/test/e2e","Test":"TestA"}
{"Action":"output","Package":"github.com/certapi/certapi/test/e2e","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"run","Package":"github.com/certapi/certapi/test/e2e","Test":"TestA/sub"}
{"Action":"fail","Package":"github.com/certapi/certapi/test/e2e","Test":"TestA/sub","Elapsed":1}
{"Action":"pass","Package":"github.com/certapi/certapi/test/e2e","Test":"TestA","Elapsed":2.5}
{"Action":"run","Package":"github.com/certapi/certapi/test/e2e","Test":"TestPod"}
{"Action":"output","Package":"github.com/certapi/certapi/test/e2e","Test":"TestPod","Output":"    podcert_test.go:178: not served: kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests\n"}
{"Action":"output","Package":"github.com/certapi/certapi/test/e2e","Test":"TestPod","Output":"--- SKIP: TestPod (0.01s)\n"}
{"Action":"skip","Package":"github.com/certapi/certapi/test/e2e","Test":"TestPod","Elapsed":0.01}
{"Action":"fail","Package":"github.com/certapi/certapi/test/e2e","Test":"TestB","Elapsed":3}
{"Action":"output","Package":"github.com/certapi/certapi/test/e2e","Test":"TestM/dry_run/pods","Output":"    m_test.go:9: not served: no PCRs\n"}
{"Action":"skip","Package":"github.com/certapi/certapi/test/e2e","Test":"TestM/dry_run/pods","Elapsed":0}
{"Action":"pass","Package":"github.com/certapi/certapi/test/e2e","Test":"TestM/dry_run","Elapsed":1}
{"Action":"pass","Package":"github.com/certapi/certapi/test/e2e","Test":"TestM","Elapsed":2}
{"Action":"fail","Package":"github.com/certapi/certapi/test/e2e","Elapsed":9}
{"Action":"fail","Package":"github.com/certapi/certapi/test/chart","Elapsed":1}
`
	got, err := ParseTestJSON(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []TestResult{
		{Test: Test{"test/e2e", "TestA"}, Result: Pass, Seconds: 2.5},
		{Test: Test{"test/e2e", "TestPod"}, Result: Skip, Seconds: 0.01, Message: "not served: kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests"},
		{Test: Test{"test/e2e", "TestB"}, Result: Fail, Seconds: 3},
		{Test: Test{"test/e2e", "TestM"}, Result: Pass, Seconds: 2, NotServed: []string{"dry_run/pods: no PCRs"}},
		{Test: Test{"test/chart", "(package test/chart)"}, Result: Fail, Seconds: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("result %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSummarize(t *testing.T) {
	f := Feature{Name: "f", Tests: []Test{{"p", "TestA"}, {"p", "TestB"}}}
	notServed := "not served: kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests"
	for _, tc := range []struct {
		name  string
		tests []TestResult
		want  Cell
	}{
		{name: "all passed", want: Cell{Status: "tested"}, tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "TestB"}, Result: Pass}}},
		{name: "one failed", want: Cell{Status: "FAILS", Note: "TestB"}, tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "TestB"}, Result: Fail}}},
		{name: "all not served", tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Skip, Message: notServed}, {Test: Test{"p", "TestB"}, Result: Skip, Message: notServed}},
			want: Cell{Status: "off", Note: "kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests"}},
		{name: "one not served", tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "TestB"}, Result: Skip, Message: notServed}},
			want: Cell{Status: "partly off", Note: "kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests"}},
		{name: "a subtest not served", tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Pass, NotServed: []string{"no PCRs"}}, {Test: Test{"p", "TestB"}, Result: Pass}},
			want: Cell{Status: "partly off", Note: "no PCRs"}},
		{name: "skipped for another reason", want: Cell{Status: "FAILS", Note: "TestB"}, tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "TestB"}, Result: Skip, Message: "short"}}},
		{name: "one not run", want: Cell{Status: "not run"}, tests: []TestResult{{Test: Test{"p", "TestA"}, Result: Pass}}},
		{name: "the package failed", want: Cell{Status: "FAILS", Note: "TestB"}, tests: []TestResult{
			{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "(package p)"}, Result: Fail}}},
		{name: "nothing", want: Cell{Status: "not run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summarize(f, Results{Tests: tc.tests}); got != tc.want {
				t.Errorf("Summarize = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPackages(t *testing.T) {
	pkgs, run := Packages([]Feature{
		{Tests: []Test{{"test/e2e", "TestA"}, {"test/chart", "TestC"}}},
		{Tests: []Test{{"test/e2e", "TestB"}, {"test/e2e", "TestA"}}},
	})
	if strings.Join(pkgs, " ") != "test/chart test/e2e" {
		t.Errorf("packages %v", pkgs)
	}
	if run["test/e2e"] != "^(TestA|TestB)$" || run["test/chart"] != "^(TestC)$" {
		t.Errorf("run patterns %v", run)
	}
	// Every feature names at least one test, and no test shows two features.
	seen := map[Test]string{}
	for _, f := range Features {
		if len(f.Tests) == 0 {
			t.Errorf("feature %q has no test", f.Name)
		}
		for _, tt := range f.Tests {
			if other, ok := seen[tt]; ok {
				t.Errorf("%s.%s shows both %q and %q", tt.Package, tt.Name, other, f.Name)
			}
			seen[tt] = f.Name
		}
	}
}

func TestTable(t *testing.T) {
	f := []Feature{{Name: "issuance", Tests: []Test{{"p", "TestA"}}}, {Name: "pods", Tests: []Test{{"p", "TestP"}}}}
	old := Results{Minor: "1.33", Kubernetes: "v1.33.7", Certapi: "v0.0.0-gabc", Date: "2026-12-02", Seconds: 300, Tests: []TestResult{
		{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "TestP"}, Result: Skip, Message: "not served: no PCRs"}}}
	cur := Results{Minor: "1.37", Kubernetes: "v1.37.2", Certapi: "v0.0.0-gabc", Date: "2026-12-02", Seconds: 320, Tests: []TestResult{
		{Test: Test{"p", "TestA"}, Result: Pass}, {Test: Test{"p", "TestP"}, Result: Pass}}}
	got := string(Table(f, []Results{old, cur}))
	for _, want := range []string{
		"| feature | 1.33 | 1.37 |\n|---|---|---|\n",
		"| issuance | tested | tested |\n",
		"| pods | off [1] | tested |\n",
		"1. 1.33, pods: no PCRs\n",
		"- 1.33: kube-apiserver and kubectl v1.33.7, certapi v0.0.0-gabc, 2026-12-02; 2 tests in 5m0s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestCompareMinor(t *testing.T) {
	if compareMinor("1.9", "1.10") >= 0 || compareMinor("1.37", "1.33") <= 0 || compareMinor("1.33", "1.33") != 0 {
		t.Error("minors out of order")
	}
}
