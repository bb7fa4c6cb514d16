package rooms

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ResolvePointerForTest reports whether the RFC 6901 pointer p names a value
// in the JSON document doc.
func ResolvePointerForTest(doc []byte, p string) (bool, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return false, err
	}
	for _, tok := range strings.Split(p, "/")[1:] {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch c := v.(type) {
		case map[string]any:
			e, ok := c[tok]
			if !ok {
				return false, nil
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return false, nil
			}
			v = c[i]
		default:
			return false, nil
		}
	}
	return true, nil
}
