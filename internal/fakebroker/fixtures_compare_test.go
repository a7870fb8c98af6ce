package fakebroker

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// comparer collects the differences between a recorded and a fake answer.
type comparer struct {
	r      *replayer
	ignore map[string]bool
	diffs  []string
}

func (c *comparer) addf(format string, args ...any) {
	c.diffs = append(c.diffs, fmt.Sprintf(format, args...))
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", v)
}

func keysOf(v any) string {
	m, _ := v.(map[string]any)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return "{" + strings.Join(keys, ",") + "}"
}

// shape compares structure: the top-level type exactly; below it, object
// keys recursively (arrays through their first elements) and the types of
// non-null scalars. A null on either side below the top level matches
// anything, since nullable fields depend on state (lease expiry, errors).
func (c *comparer) shape(path string, rec, got any) {
	rt, gt := jsonType(rec), jsonType(got)
	if path != "$" && (rt == "null" || gt == "null") {
		return
	}
	if rt != gt {
		c.addf("%s: type %s, recorded %s", path, gt, rt)
		return
	}
	switch x := rec.(type) {
	case map[string]any:
		g := got.(map[string]any)
		for k := range x {
			if _, ok := g[k]; !ok {
				c.addf("%s: key %q missing", path, k)
			}
		}
		for k := range g {
			if _, ok := x[k]; !ok && !c.ignore[k] {
				c.addf("%s: extra key %q", path, k)
			}
		}
		for k, v := range x {
			if gv, ok := g[k]; ok {
				c.shape(path+"."+k, v, gv)
			}
		}
	case []any:
		g := got.([]any)
		if (len(x) == 0) != (len(g) == 0) {
			c.addf("%s: %d elements, recorded %d", path, len(g), len(x))
			return
		}
		if len(x) > 0 {
			c.shape(path+"[0]", x[0], g[0])
		}
	}
}

// topLevelValues are the fields of a top-level object whose values must be
// equal (after id mapping): outcomes and the names of what was acted on.
var topLevelValues = []string{
	"success", "error", "status", "existed", "deleted", "configured", "fresh", "reset",
	"seekToEnd", "updated", "queue", "queueName", "consumerGroup", "partition", "partitionName",
	"partitionId", "leaseId",
}

// itemValues are the fields compared on every element of a top-level array.
var itemValues = []string{
	"status", "success", "error", "dlq", "leaseReleased", "queueName", "partitionName",
	"transactionId", "transaction_id", "message_id", "partition_id",
}

// values compares the meaningful literal values.
func (c *comparer) values(rec, got any) {
	switch x := rec.(type) {
	case []any:
		g, _ := got.([]any)
		if len(x) != len(g) {
			c.addf("%d items, recorded %d", len(g), len(x))
			return
		}
		for i := range x {
			c.fields(fmt.Sprintf("[%d]", i), x[i], g[i], itemValues)
		}
	case map[string]any:
		g, _ := got.(map[string]any)
		c.fields("$", x, g, topLevelValues)
		// Which messages a pop delivered, in order.
		if msgs, ok := x["messages"].([]any); ok && x["leaseId"] != nil {
			gm, _ := g["messages"].([]any)
			if len(gm) != len(msgs) {
				c.addf("$.messages: %d messages, recorded %d", len(gm), len(msgs))
				return
			}
			for i := range msgs {
				c.fields(fmt.Sprintf("$.messages[%d]", i), msgs[i], gm[i], []string{"transactionId", "id", "partition", "leaseId"})
			}
		}
		if rs, ok := x["results"].([]any); ok {
			c.values(rs, g["results"])
		}
	}
}

func (c *comparer) fields(path string, rec, got any, keys []string) {
	rm, _ := rec.(map[string]any)
	gm, _ := got.(map[string]any)
	for _, k := range keys {
		rv, ok := rm[k]
		if t := jsonType(rv); !ok || t == "object" || t == "array" {
			continue
		}
		gv := gm[k]
		if s, ok := rv.(string); ok {
			rv = c.r.mapID(s)
			if k == "error" && strings.HasPrefix(s, "Invalid JSON:") {
				if gs, _ := gv.(string); strings.HasPrefix(gs, "Invalid JSON:") {
					continue
				}
			}
		}
		if fmt.Sprint(rv) != fmt.Sprint(gv) || jsonType(rv) != jsonType(gv) {
			c.addf("%s.%s = %v, recorded %v", path, k, abbreviateValue(gv), abbreviateValue(rv))
		}
	}
}
