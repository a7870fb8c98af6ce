package limits

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/queengate/queengate/wire"
)

func retentionLimits(ceiling Cap) Effective {
	lim := AllUnlimited()
	lim.MaxRetentionSeconds = ceiling
	return lim
}

func TestCheckConfigure(t *testing.T) {
	const day = 86400
	cases := []struct {
		name    string
		body    string
		ceiling Cap
		queue   string
		refusal string
		ok      bool
	}{
		// Recorded broker traffic (fixtures C5, C7, C9, C10, C11, C12, C13).
		{"fixture with options", `{"queue": "cat-orders", "namespace": "shop", "task": "billing", "options": {"leaseTime": 30, "retryLimit": 2, "retryDelay": 1000, "priority": 5}}`,
			day, "cat-orders", "", true},
		{"fixture no options", `{"queue": "cat-empty"}`, day, "cat-empty", "", true},
		{"fixture maxSize", `{"queue": "cat-capped", "options": {"maxSize": 2}}`, day, "cat-capped", "", true},
		{"fixture queue missing", `{"options": {"leaseTime": 5}}`, day, "", "", false},
		{"fixture queue not a string", `{"queue": 42}`, day, "", "", false},
		{"fixture invalid JSON", `{"queue": "x",`, day, "", "", false},
		{"fixture empty body", ``, day, "", "", false},

		{"empty queue name is legal", `{"queue":""}`, day, "", "", true},
		{"not an object", `["queue"]`, day, "", "", false},
		{"trailing data", `{"queue":"q"} {}`, day, "", "", false},
		{"byte order mark", "\xef\xbb\xbf{\"queue\":\"q\"}", day, "", "", false},
		{"NUL refused", `{"queue":"q\u0000"}`, day, "", "", false},
		{"queue of 255 characters", `{"queue":"` + strings.Repeat("\u00e9", 255) + `"}`, day, strings.Repeat("\u00e9", 255), "", true},
		{"queue over 255 characters", `{"queue":"` + strings.Repeat("q", 256) + `"}`, day, "", "", false},
		{"namespace over 255 characters", `{"queue":"q","namespace":"` + strings.Repeat("n", 256) + `"}`, day, "", "", false},
		{"last task counts", `{"queue":"q","task":"` + strings.Repeat("t", 256) + `","task":"t"}`, day, "q", "", true},
		{"escaped queue", `{"queue":"a\u00e9"}`, day, "aé", "", true},
		{"last queue wins", `{"queue":1,"queue":"b"}`, day, "b", "", true},

		{"at the ceiling", `{"queue":"q","options":{"retentionSeconds":86400}}`, day, "q", "", true},
		{"over in options", `{"queue":"q","options":{"retentionSeconds":86401}}`, day, "q",
			"retentionSeconds of 86401s exceeds the plan's max_retention_seconds (86400s)", true},
		{"completed over", `{"queue":"q","options":{"completedRetentionSeconds":90000,"retentionSeconds":10}}`, day, "q",
			"completedRetentionSeconds of 90000s exceeds the plan's max_retention_seconds (86400s)", true},
		{"first key in check order reported", `{"queue":"q","options":{"completedRetentionSeconds":90000,"retentionSeconds":100000}}`, day, "q",
			"retentionSeconds of 100000s exceeds the plan's max_retention_seconds (86400s)", true},
		{"top-level bag when no options", `{"queue":"q","retentionSeconds":100000}`, day, "q",
			"retentionSeconds of 100000s exceeds the plan's max_retention_seconds (86400s)", true},
		{"options not an object: top-level bag", `{"queue":"q","options":null,"completedRetentionSeconds":"100000"}`, day, "q",
			"completedRetentionSeconds of 100000s exceeds the plan's max_retention_seconds (86400s)", true},
		{"options object hides top level", `{"queue":"q","retentionSeconds":100000,"options":{}}`, day, "q", "", true},
		{"string value trimmed", `{"queue":"q","options":{"retentionSeconds":" 100000\n"}}`, day, "q",
			"retentionSeconds of 100000s exceeds the plan's max_retention_seconds (86400s)", true},
		{"non-integer string ignored", `{"queue":"q","options":{"retentionSeconds":"lots"}}`, day, "q", "", true},
		{"zero means disabled", `{"queue":"q","options":{"retentionSeconds":0,"completedRetentionSeconds":0}}`, day, "q", "", true},
		{"negative ignored", `{"queue":"q","options":{"retentionSeconds":-1,"completedRetentionSeconds":"-5"}}`, 1, "q", "", true},
		{"other keys ignored", `{"queue":"q","options":{"maxWaitTimeSeconds":999999,"ttl":999999}}`, day, "q", "", true},
		{"fraction counts by integer part", `{"queue":"q","options":{"retentionSeconds":86400.9}}`, day, "q", "", true},
		{"fraction over", `{"queue":"q","options":{"retentionSeconds":86401.5}}`, day, "q",
			"retentionSeconds of 86401s exceeds the plan's max_retention_seconds (86400s)", true},
		{"exponent", `{"queue":"q","options":{"retentionSeconds":1e6}}`, day, "q",
			"retentionSeconds of 1000000s exceeds the plan's max_retention_seconds (86400s)", true},
		{"huge", `{"queue":"q","options":{"retentionSeconds":123456789012345678901234567890}}`, day, "q",
			"retentionSeconds of 123456789012345678901234567890s exceeds the plan's max_retention_seconds (86400s)", true},
		{"boolean ignored", `{"queue":"q","options":{"retentionSeconds":true}}`, day, "q", "", true},
		{"last duplicate wins", `{"queue":"q","options":{"retentionSeconds":999999,"retentionSeconds":5}}`, day, "q", "", true},
		{"unlimited ceiling", `{"queue":"q","options":{"retentionSeconds":999999999}}`, Unlimited, "q", "", true},
		{"zero ceiling refuses any positive", `{"queue":"q","options":{"retentionSeconds":1}}`, 0, "q",
			"retentionSeconds of 1s exceeds the plan's max_retention_seconds (0s)", true},
	}
	for _, c := range cases {
		q, refusal, err := CheckConfigure([]byte(c.body), retentionLimits(c.ceiling))
		if ok := err == nil; q != c.queue || refusal != c.refusal || ok != c.ok {
			t.Errorf("%s: got (%q, %q, %v), want (%q, %q, %v)", c.name, q, refusal, ok, c.queue, c.refusal, c.ok)
		}
	}
}

func TestParseReplayDestination(t *testing.T) {
	half := func(missing string) string { return replayHalfDestination(missing) }
	cases := []struct {
		body       string
		q, p, refu string
		ok         bool
	}{
		{"", "", "", "", true},
		{" \n\t", "", "", "", true},
		{`{}`, "", "", "", true},
		{`{"queue":"dest","partition":"p1"}`, "dest", "p1", "", true},
		{`{"queue":"  dest ","partition":" p1\t"}`, "dest", "p1", "", true},
		{`{"queue":"dest"}`, "", "", half("partition"), true},
		{`{"partition":"p1"}`, "", "", half("queue"), true},
		{`{"queue":"dest","partition":"   "}`, "", "", half("partition"), true},
		{`{"queue":null,"partition":"p"}`, "", "", half("queue"), true},
		{`{"queue":"","partition":""}`, "", "", "", true},
		{`{"queue":"a","partition":"b","other":[1,2]}`, "a", "b", "", true},
		{`{"queue":1,"partition":"b"}`, "", "", "", false},
		{`{"queue":"a"`, "", "", "", false},
		{`"a"`, "", "", "", false},
		{`[]`, "", "", "", false},
		{`null`, "", "", "", false},
		{`{"queue":"a","partition":"b"} x`, "", "", "", false},
	}
	for _, c := range cases {
		q, p, r, err := ParseReplayDestination([]byte(c.body))
		if ok := err == nil; q != c.q || p != c.p || r != c.refu || ok != c.ok {
			t.Errorf("%q: got (%q, %q, %q, %v), want (%q, %q, %q, %v)", c.body, q, p, r, ok, c.q, c.p, c.refu, c.ok)
		}
	}
	if m := half("partition"); !strings.HasPrefix(m, "partition override missing: ") ||
		!strings.Contains(m, "must name both `queue` and `partition`") {
		t.Errorf("message %q", m)
	}
}

// modelConfigure is CheckConfigure written with json.Unmarshal.
func modelConfigure(body []byte, ceiling int64) (string, string, bool) {
	top, ok := modelTop(body)
	if !ok {
		return "", "", false
	}
	q, ok := modelString(top["queue"])
	if !ok {
		return "", "", false
	}
	bag := top
	if opts, ok := modelObject(top["options"]); ok {
		bag = opts
	}
	if ceiling < 0 {
		return q, "", true
	}
	for _, key := range retentionKeys {
		v, present := bag[key]
		if !present {
			continue
		}
		if s, isString := modelString(v); isString {
			i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				continue
			}
			if i > 0 && i > ceiling {
				return q, key + " of " + strconv.FormatInt(i, 10) + "s exceeds the plan's max_retention_seconds (" + strconv.FormatInt(ceiling, 10) + "s)", true
			}
			continue
		}
		var num json.Number
		if json.Unmarshal(v, &num) != nil {
			continue
		}
		f, _ := strconv.ParseFloat(string(num), 64)
		n := math.Trunc(f)
		if i, err := strconv.ParseInt(string(num), 10, 64); err == nil {
			if i > 0 && i > ceiling {
				return q, key + " of " + string(num) + "s exceeds the plan's max_retention_seconds (" + strconv.FormatInt(ceiling, 10) + "s)", true
			}
			continue
		}
		if n >= math.MaxInt64 {
			return q, key + " of " + string(num) + "s exceeds the plan's max_retention_seconds (" + strconv.FormatInt(ceiling, 10) + "s)", true
		}
		if n >= 1 && int64(n) > ceiling {
			return q, key + " of " + strconv.FormatInt(int64(n), 10) + "s exceeds the plan's max_retention_seconds (" + strconv.FormatInt(ceiling, 10) + "s)", true
		}
	}
	return q, "", true
}

// modelReplay is ParseReplayDestination written with json.Unmarshal.
func modelReplay(body []byte) (string, string, string, bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", "", "", true
	}
	top, ok := modelTop(body)
	if !ok {
		return "", "", "", false
	}
	get := func(k string) (string, bool) {
		v, present := top[k]
		if !present || string(v) == "null" {
			return "", true
		}
		s, ok := modelString(v)
		return strings.TrimSpace(s), ok
	}
	q, qok := get("queue")
	p, pok := get("partition")
	switch {
	case !qok || !pok:
		return "", "", "", false
	case q != "" && p != "":
		return q, p, "", true
	case q != "":
		return "", "", replayHalfDestination("partition"), true
	case p != "":
		return "", "", replayHalfDestination("queue"), true
	}
	return "", "", "", true
}

// modelConfigureNamesTooLong is the broker's queues table taking a
// configure body: its top-level queue, namespace and task land in
// varchar(255) columns, counted in characters.
func modelConfigureNamesTooLong(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	for _, k := range []string{"queue", "namespace", "task"} {
		var s string
		if raw, ok := top[k]; ok && len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil && utf8.RuneCountInString(s) > 255 {
			return true
		}
	}
	return false
}

func FuzzConfigure(f *testing.F) {
	for _, s := range []string{
		`{"queue": "cat-orders", "namespace": "shop", "options": {"leaseTime": 30, "retentionSeconds": 3600}}`,
		`{"queue":"q","options":null,"completedRetentionSeconds":" 100000 "}`,
		`{"queue":"q","options":{"retentionSeconds":86401.5,"retentionSeconds":1e9}}`,
		`{"queue":"dest","partition":" p1 "}`,
		`{"queue":null,"partition":"p"}`,
		`{"queue":"q","options":{"retentionSeconds":123456789012345678901234567890}}`,
		"\xef\xbb\xbf{\"queue\":\"\"}",
		`{"queue":"q","namespace":"` + strings.Repeat("n", 256) + `"}`,
		`{"queue":"q","task":"` + strings.Repeat("\u00e9", 255) + `","task":"` + strings.Repeat("t", 256) + `"}`,
		``,
	} {
		f.Add([]byte(s), int64(86400))
	}
	f.Fuzz(func(t *testing.T, body []byte, ceiling int64) {
		if ceiling < -1 {
			ceiling = -1
		}
		orig := bytes.Clone(body)
		checkErr := wire.CheckStored(body)
		q, r, err := CheckConfigure(body, retentionLimits(Cap(ceiling)))
		switch {
		case checkErr != nil:
			if err != checkErr && err.Error() != checkErr.Error() {
				t.Fatalf("configure of a body the grammar refuses: %v, want %v", err, checkErr)
			}
		default:
			mq, mr, mok := modelConfigure(body, ceiling)
			if mok && modelConfigureNamesTooLong(body) {
				mq, mr, mok = "", "", false
			}
			if q != mq || r != mr || (err == nil) != mok {
				t.Fatalf("configure (%q, %q, %v), model (%q, %q, %v)", q, r, err, mq, mr, mok)
			}
		}
		a, b, c, err := ParseReplayDestination(body)
		ma, mb, mc, mok := modelReplay(body)
		if checkErr != nil && len(bytes.TrimSpace(body)) > 0 {
			ma, mb, mc, mok = "", "", "", false
		}
		if a != ma || b != mb || c != mc || (err == nil) != mok {
			t.Fatalf("replay (%q, %q, %q, %v), model (%q, %q, %q, %v)", a, b, c, err, ma, mb, mc, mok)
		}
		if !bytes.Equal(body, orig) {
			t.Fatal("the body was modified")
		}
	})
}
