package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/certapi/certapi/hack/internal/matrix"
)

// TestPrintFailures checks that a failed test's file messages are repeated, and that a package that
// failed as a whole has its last lines outside any test repeated, since it has no test to name.
func TestPrintFailures(t *testing.T) {
	goTestJSON := []byte(strings.Join([]string{
		`{"Action":"output","Package":"github.com/certapi/certapi/test/a","Test":"TestX","Output":"    x_test.go:12: want 1, got 2\n"}`,
		`{"Action":"output","Package":"github.com/certapi/certapi/test/a","Test":"TestY","Output":"    y_test.go:3: not failed\n"}`,
		`{"Action":"output","Package":"github.com/certapi/certapi/test/b","Output":"starting certapi\n"}`,
		`{"Action":"output","Package":"github.com/certapi/certapi/test/b","Output":"bind: address already in use\n"}`,
		`{"Action":"output","Package":"github.com/certapi/certapi/test/c","Output":"a passing package's line\n"}`,
	}, "\n"))
	tests := []matrix.TestResult{
		{Test: matrix.Test{Package: "test/a", Name: "TestX"}, Result: matrix.Fail},
		{Test: matrix.Test{Package: "test/a", Name: "TestY"}, Result: matrix.Pass},
		{Test: matrix.Test{Package: "test/b", Name: "(package test/b)"}, Result: matrix.Fail},
	}
	var out bytes.Buffer
	printFailures(&out, "1.33", goTestJSON, tests)
	want := "FAIL 1.33: TestX: x_test.go:12: want 1, got 2\n" +
		"FAIL 1.33: (package): starting certapi\n" +
		"FAIL 1.33: (package): bind: address already in use\n"
	if out.String() != want {
		t.Errorf("printFailures printed\n%s\nwant\n%s", out.String(), want)
	}
}
