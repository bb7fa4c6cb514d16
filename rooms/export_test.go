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
			i, convErr := strconv.Atoi(tok)
			if convErr != nil || i < 0 || i >= len(c) {
				return false, nil //nolint:nilerr // not an index of this array: no such member, not a failure
			}
			v = c[i]
		default:
			return false, nil
		}
	}
	return true, nil
}
