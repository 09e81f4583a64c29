//go:build tools

// Package tools keeps the code generator in go.mod, so hack/update-codegen.sh runs the version we pin.
package tools

import _ "k8s.io/code-generator"
