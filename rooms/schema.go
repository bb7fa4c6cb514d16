package rooms

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaURL is the name a version's schema is compiled under. Schemas may not
// load anything remote: a $ref outside the document fails to compile.
const schemaURL = "urn:messaging-api:schema.json"

// CompileSchema checks that raw is a JSON Schema (draft 2020-12 unless its
// $schema says otherwise) and compiles it for validating payloads.
func CompileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("is not JSON: %w", err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, errors.New("must be a JSON Schema: an object or a boolean")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemoteLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %w", err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %s", schemaErrorText(err))
	}
	return sch, nil
}

func schemaErrorText(err error) string {
	s := err.Error()
	return strings.ReplaceAll(s, schemaURL, "schema")
}

type noRemoteLoader struct{}

func (noRemoteLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %q: schemas must be self-contained (no remote $ref)", url)
}
