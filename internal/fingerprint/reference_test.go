package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/once-dev/once/internal/jsonescape"
)

// referenceCanonicalize is a slow, obviously-correct Canonicalize built on
// json.Decoder.Token, json.Marshal and a separate surrogate scan. The fuzzer
// holds Canonicalize to it: same acceptance, same bytes.
func referenceCanonicalize(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, ErrInvalidJSON
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	out, err := refValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ErrInvalidJSON
	}
	if err := refSurrogates(body); err != nil {
		return nil, err
	}
	return out, nil
}

func refToken(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.Join(ErrInvalidJSON, err)
	}
	return tok, nil
}

func refValue(dec *json.Decoder, depth int) ([]byte, error) {
	tok, err := refToken(dec)
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		if depth+1 > MaxDepth {
			return nil, ErrInvalidJSON
		}
		if tok == '[' {
			out := []byte{'['}
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out = append(out, ',')
				}
				v, err := refValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v...)
			}
			if _, err := refToken(dec); err != nil {
				return nil, err
			}
			return append(out, ']'), nil
		}
		type kv struct {
			k string
			v []byte
		}
		var members []kv
		for dec.More() {
			tok, err := refToken(dec)
			if err != nil {
				return nil, err
			}
			k := tok.(string)
			for _, m := range members {
				if m.k == k {
					return nil, ErrInvalidJSON
				}
			}
			v, err := refValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			members = append(members, kv{k, v})
		}
		if _, err := refToken(dec); err != nil {
			return nil, err
		}
		slices.SortFunc(members, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		out := []byte{'{'}
		for i, m := range members {
			if i > 0 {
				out = append(out, ',')
			}
			k, _ := json.Marshal(m.k)
			out = append(append(append(out, k...), ':'), m.v...)
		}
		return append(out, '}'), nil
	case json.Number:
		return []byte(tok), nil
	default: // string, bool, nil
		return json.Marshal(tok)
	}
}

// refSurrogates finds an escaped lone UTF-16 surrogate in valid JSON.
func refSurrogates(body []byte) error {
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\':
			if body[i+1] == 'u' {
				r, _ := jsonescape.Hex4(body, i+2)
				if 0xD800 <= r && r <= 0xDBFF {
					if body[i+6] == '\\' && body[i+7] == 'u' {
						if lo, _ := jsonescape.Hex4(body, i+8); 0xDC00 <= lo && lo <= 0xDFFF {
							i += 11
							continue
						}
					}
					return ErrInvalidJSON
				}
				if 0xDC00 <= r && r <= 0xDFFF {
					return ErrInvalidJSON
				}
			}
			i++
		}
	}
	return nil
}
