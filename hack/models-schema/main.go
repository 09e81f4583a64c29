// Command models-schema prints the OpenAPI v2 definitions of certapi's types as JSON. hack/update-codegen.sh
// feeds it to applyconfiguration-gen, so that generated apply configurations know each field's merge strategy.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/certapi/certapi/pkg/generated/openapi"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(map[string]spec.Schema, len(defs))
	for name, def := range defs {
		// A definition may carry its v2 form in an extension; the output is always OpenAPI v2.
		if v2, ok := def.Schema.Extensions[common.ExtensionV2Schema].(spec.Schema); ok {
			schemas[name] = v2
			continue
		}
		schemas[name] = def.Schema
	}
	data, err := json.Marshal(&spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger:     "2.0",
		Definitions: schemas,
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "certapi", Version: "unversioned"}},
	}})
	if err != nil {
		return fmt.Errorf("encoding definitions: %w", err)
	}
	_, err = os.Stdout.Write(data)
	return err
}
