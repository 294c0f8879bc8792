package gate

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/pkg/api"
)

// A submission's body is read once (docs/architecture.md): the canonicalizer
// checks and rewrites its JSON and hands back the top-level members
// (fingerprint.CanonicalizeObject); the job is decoded from those members,
// and the body the fingerprint is taken over is assembled from them, without
// another scan of the text.

// readJob decodes the job a canonical body asks for, from its members; a
// body the fast decoder does not take is decoded by api.DecodeJobRequest,
// whose error says what is wrong.
func readJob(canonical []byte, members []fingerprint.Member, own string) (api.JobRequest, error) {
	if job, ok := decodeMembers(members, own); ok {
		return job, nil
	}
	return api.DecodeJobRequest(canonical, own)
}

// decodeMembers decodes the members of a canonical POST /v1/jobs body (valid
// UTF-8 JSON, members sorted, no duplicate keys, no lone surrogates, nesting
// bounded: the JSON checks api.DecodeJobRequest makes), so that what is left
// is to find the three members and check the names. ok is false for anything
// but a valid request; when ok is true the result equals
// api.DecodeJobRequest's (body_test.go checks it), its Payload a slice of the
// canonical text.
func decodeMembers(members []fingerprint.Member, defaultDC string) (req api.JobRequest, ok bool) {
	var seenType bool
	for _, m := range members {
		switch string(m.Key) {
		case "datacenters":
			if req.Datacenters, ok = datacenters(m.Value); !ok {
				return req, false
			}
		case "payload":
			req.Payload = json.RawMessage(m.Value)
		case "type":
			t, tail, ok := plainString(m.Value)
			if !ok || len(tail) != 0 || !api.ValidName(t, api.MaxTypeLen) {
				return req, false
			}
			req.Type, seenType = string(t), true
		default:
			return req, false
		}
	}
	if !seenType {
		return req, false
	}
	if req.Payload == nil {
		req.Payload = json.RawMessage("null")
	}
	if req.Datacenters == nil {
		req.Datacenters = []string{defaultDC}
	}
	return req, true
}

// datacentersMember is how the datacenters member of a canonical body
// begins; members are sorted, so in a valid request it comes first.
const datacentersMember = `"datacenters":`

// omittedList reports whether a valid submission's canonical members omit
// the datacenters list (absent or null).
func omittedList(members []fingerprint.Member) bool {
	return len(members) == 0 || string(members[0].Key) != "datacenters" || string(members[0].Value) == "null"
}

// fingerprintBody is the body the fingerprint of a valid submission is taken
// over, and whether it is an omitted list in a federation (claimed): the
// datacenters member dropped, then (null is absent), so that every gate of
// every datacenter fingerprints it alike; else the canonical body with its
// datacenters member replaced by the set job resolves to (sorted, each name
// once; omitted means the gate's own datacenter), so that bodies naming the
// same set have the same fingerprint.
func fingerprintBody(canonical []byte, members []fingerprint.Member, job api.JobRequest, federated bool) (body []byte, claimed bool) {
	rest := restMembers(canonical, members)
	if omittedList(members) && federated {
		return append([]byte{'{'}, rest...), true
	}
	if len(members) > 0 && string(members[0].Key) == "datacenters" && listText(members[0].Value, job.Datacenters) {
		// The body names the set as withDatacenters writes it (most do):
		// the canonical body is that body already, nothing to build.
		return canonical, false
	}
	return withDatacenters(rest, job.Datacenters), false
}

// listText reports whether v is the datacenters list dcs as withDatacenters
// writes it: ["a","b"], no escapes (a valid name has none).
func listText(v []byte, dcs []string) bool {
	if len(v) == 0 || v[0] != '[' {
		return false
	}
	v = v[1:]
	for i, dc := range dcs {
		if i > 0 {
			if len(v) == 0 || v[0] != ',' {
				return false
			}
			v = v[1:]
		}
		if len(v) < len(dc)+2 || v[0] != '"' || string(v[1:1+len(dc)]) != dc || v[1+len(dc)] != '"' {
			return false
		}
		v = v[len(dc)+2:]
	}
	return string(v) == "]"
}

// restMembers is a valid canonical body after its '{' and its datacenters
// member: its other members and the closing '}'.
func restMembers(canonical []byte, members []fingerprint.Member) []byte {
	rest := canonical[1:]
	if len(members) > 0 && string(members[0].Key) == "datacenters" {
		rest = bytes.TrimPrefix(rest[len(datacentersMember)+len(members[0].Value):], []byte(","))
	}
	return rest
}

// withDatacenters is the canonical body of rest (restMembers) with the
// datacenters member dcs, a sorted set, first.
func withDatacenters(rest []byte, dcs []string) []byte {
	out := make([]byte, 0, len(rest)+len(datacentersMember)+16*len(dcs)+4)
	out = append(out, '{')
	out = append(out, datacentersMember...)
	out = append(out, '[')
	for i, dc := range dcs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, dc...)
		out = append(out, '"')
	}
	out = append(out, ']')
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// datacenters reads null or an array of 1 to api.MaxDatacenters valid names,
// as a sorted set (nil, true for null), as api.DecodeJobRequest does.
func datacenters(v []byte) ([]string, bool) {
	if string(v) == "null" {
		return nil, true
	}
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, false
	}
	v = v[1 : len(v)-1]
	var out []string
	items := 0
	for len(v) > 0 {
		name, rest, ok := plainString(v)
		if !ok || !api.ValidName(name, api.MaxDatacenterLen) || items == api.MaxDatacenters {
			return nil, false
		}
		items++
		if !slices.Contains(out, string(name)) { // a set: repetition does not matter
			out = append(out, string(name))
		}
		if len(rest) > 0 {
			if rest[0] != ',' || len(rest) == 1 {
				return nil, false
			}
			rest = rest[1:]
		}
		v = rest
	}
	slices.Sort(out) // a set: order does not matter
	return out, len(out) > 0
}

// plainString reads a string without escapes at the start of s: its bytes
// and what follows. A string with an escape is not plain (no valid name has
// one, so the caller falls back).
func plainString(s []byte) (str, rest []byte, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			return s[1:i], s[i+1:], true
		case '\\':
			return nil, nil, false
		}
	}
	return nil, nil, false
}
