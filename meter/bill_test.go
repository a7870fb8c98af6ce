package meter

import (
	"strings"
	"testing"
)

// M1: push items count when queued or buffered.
func TestBillPushFixtures(t *testing.T) {
	want := map[string]int64{
		"C14": 1, "C15": 3, "C16": 1, "C17": 0, "C18": 1, "C19": 1, "C20": 1, "C21": 2, "C22": 1, "C23": 3,
		"C24": 0,                                                   // 201 []
		"C25": 0, "C26": 0, "C27": 0, "C28": 0, "C29": 0, "C30": 0, // 400s
		"C31": 3, "C32": 1, "C33": 1, "C44": 1, "C47": 1, "C72": 1, "C77": 1, "C84": 1, "C163": 2,
		"S2": 1, "S3": 1, "S4": 0, "S5": 5, "S6": 1, "S7": 2, "S25": 1, "S27": 1,
	}
	for ref, n := range want {
		ex := fx(t, ref)
		if ex.Method != "POST" || ex.Path != "/api/v1/push" {
			t.Fatalf("%s is %s %s, not a push", ref, ex.Method, ex.Path)
		}
		if got := BillPush(ex.status(t), ex.body(t)); got != n {
			t.Errorf("%s (%s): BillPush = %d, want %d", ref, ex.Name, got, n)
		}
	}
	// Every recorded push is covered above.
	for _, ex := range allFixtures(t, "POST", func(p string) bool { return p == "/api/v1/push" }) {
		if _, ok := want[ex.ref]; !ok {
			t.Errorf("push exchange seq %d (%s) has no expectation", ex.Seq, ex.Name)
		}
	}
}

func TestBillPushEdgeCases(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		body     string
		want     int64
		buffered int64
	}{
		{"maintenance 201 buffered", 201, `[{"status":"buffered","queue":"q","partition":"p","transactionId":"t"},{"status":"buffered","queue":"q","partition":"p"}]`, 2, 2},
		{"failover 200 buffered", 200, `[{"status":"buffered","queue":"q"},{"status":"queued"}]`, 2, 1},
		{"failed items with 500", 500, `[{"status":"failed","queue":"q","partition":"p","error":"File buffer write failed"}]`, 0, 0},
		{"failed, error and unknown statuses", 200, `[{"status":"failed"},{"status":"error"},{"status":"QUEUED"},{"status":"weird"},{}]`, 0, 0},
		{"per-item success:false objects", 200, `[{"success":false,"error":"x"}]`, 0, 0},
		{"null and non-object items", 200, `[null, 3, "queued", {"status":"queued"}]`, 1, 0},
		{"status of the wrong type", 200, `[{"status":1},{"status":"queued"}]`, 1, 0},
		{"error object instead of array", 200, `{"error":"ERROR:  invalid input syntax for type uuid"}`, 0, 0},
		{"invalid JSON", 200, `[{"status":"queued"}`, 0, 0},
		{"empty body", 200, ``, 0, 0},
		{"whitespace around", 201, " \n[{\"status\":\"queued\"}]\n", 1, 0},
		{"queued but 400", 400, `[{"status":"queued"}]`, 0, 0},
		{"queued but 502", 502, `[{"status":"queued"}]`, 0, 0},
	}
	for _, c := range cases {
		if got := BillPush(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%s: BillPush = %d, want %d", c.name, got, c.want)
		}
		if got := BillPushDetail(c.status, []byte(c.body)).Buffered; got != c.buffered {
			t.Errorf("%s: Buffered = %d, want %d", c.name, got, c.buffered)
		}
	}
	d := BillPushDetail(201, []byte(`[{"status":"buffered"},{"status":"buffered"},{"status":"queued"}]`))
	if !d.MostlyBuffered() || d.Items != 3 || d.Accepted != 3 {
		t.Errorf("detail = %+v, mostly buffered %v", d, d.MostlyBuffered())
	}
	if d := BillPushDetail(200, []byte(`[{"status":"buffered"},{"status":"queued"}]`)); d.MostlyBuffered() {
		t.Errorf("half buffered is not mostly buffered: %+v", d)
	}
}

// M2: ephemeral push bills {"pushed": N}. The recorded broker (0.15.1) has
// no ephemeral routes, so these bodies are hand-written.
func TestBillEphemeralPush(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   int64
	}{
		{201, `{"pushed":3}`, 3},
		{200, `{"pushed":1,"queue":"q"}`, 1},
		{201, `{"pushed":0}`, 0},
		{201, `{"pushed":-2}`, 0},
		{201, `{"pushed":2.5}`, 0},
		{201, `{"pushed":"3"}`, 0},
		{201, `{"pushed":null}`, 0},
		{201, `{"error":"ephemeral disabled"}`, 0},
		{201, `[3]`, 0},
		{201, `not json`, 0},
		{400, `{"pushed":3}`, 0},
		{503, `{"pushed":3}`, 0},
	}
	for _, c := range cases {
		if got := BillEphemeralPush(c.status, []byte(c.body)); got != c.want {
			t.Errorf("BillEphemeralPush(%d, %s) = %d, want %d", c.status, c.body, got, c.want)
		}
	}
}

// M3: a committed transaction bills its counted push items less the
// intra-batch duplicates; a rollback (200, success:false) bills 0.
func TestBillTransactionFixtures(t *testing.T) {
	want := map[string]int64{"C86": 1, "C87": 0, "C88": 1, "C89": 0, "C90": 0, "C91": 0, "S30": 1}
	for ref, n := range want {
		ex := fx(t, ref)
		if ex.Path != "/api/v1/transaction" {
			t.Fatalf("%s is not a transaction", ref)
		}
		counted := countTxnPushItems(t, ex.RequestBody)
		if got := BillTransaction(ex.status(t), ex.body(t), counted); got != n {
			t.Errorf("%s (%s): BillTransaction(counted %d) = %d, want %d", ref, ex.Name, counted, got, n)
		}
	}
	// The rollback answers 200 with an error body: the status alone would bill it.
	if ex := fx(t, "C87"); ex.status(t) != 200 || countTxnPushItems(t, ex.RequestBody) != 1 {
		t.Fatalf("C87 changed: status %d", ex.status(t))
	}
}

func TestBillTransactionEdgeCases(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		body    string
		counted int
		want    int64
	}{
		{"duplicates subtracted", 200, `{"success":true,"results":[{"type":"push","duplicate":true},{"type":"push","duplicate":false},{"type":"push"},{"type":"ack","duplicate":true}]}`, 3, 2},
		{"null results allowed", 200, `{"success":true,"results":[null,{"type":"push","duplicate":true},null]}`, 2, 1},
		{"no results", 200, `{"success":true}`, 4, 4},
		{"more duplicates than counted", 200, `{"success":true,"results":[{"type":"push","duplicate":true},{"type":"push","duplicate":true}]}`, 1, 0},
		{"success false", 200, `{"success":false,"results":[{"type":"push"}]}`, 2, 0},
		{"success missing", 200, `{"results":[{"type":"push"}]}`, 2, 0},
		{"success as string", 200, `{"success":"true"}`, 2, 0},
		{"success null", 200, `{"success":null}`, 2, 0},
		{"duplicate of the wrong type is not a duplicate", 200, `{"success":true,"results":[{"type":"push","duplicate":"yes"}]}`, 2, 2},
		{"unreadable", 200, `{"success":tru`, 2, 0},
		{"array body", 200, `[{"success":true}]`, 2, 0},
		{"400", 400, `{"success":true}`, 2, 0},
		{"5xx", 500, `{"success":true}`, 2, 0},
		{"nothing counted", 200, `{"success":true}`, 0, 0},
		{"201 is 2xx", 201, `{"success":true}`, 1, 1},
	}
	for _, c := range cases {
		if got := BillTransaction(c.status, []byte(c.body), c.counted); got != c.want {
			t.Errorf("%s: BillTransaction = %d, want %d", c.name, got, c.want)
		}
	}
}

// M4: pops bill the delivered messages.
func TestBillPopFixtures(t *testing.T) {
	want := map[string]int64{
		"C34": 3, "C35": 2, "C36": 1, "C37": 0, "C38": 0, "C39": 0, "C40": 0, "C41": 0, "C42": 0, "C43": 1,
		"C46": 1, "C49": 2, "C50": 5, "C51": 0, "C52": 1, "C53": 4, "C54": 4,
		"C55": 0, // kept truncated in the file: unreadable, so 0
		"C73": 1, "C75": 1, "C78": 1, "C85": 1, "C169": 2,
		"S8": 2, "S11": 5, "S13": 1, "S15": 3, "S17": 5, "S19": 10, "S21": 5, "S23": 0, "S24": 1, "S28": 1,
		"S31": 4, "S33": 1, "S35": 2, "S37": 3,
	}
	for ref, n := range want {
		ex := fx(t, ref)
		if !strings.HasPrefix(ex.Path, "/api/v1/pop/queue/") {
			t.Fatalf("%s is not a pop", ref)
		}
		got, ids := BillPop(ex.status(t), ex.body(t))
		if got != n {
			t.Errorf("%s (%s): BillPop = %d, want %d", ref, ex.Name, got, n)
		}
		if int64(len(ids)) != got {
			t.Errorf("%s: %d redelivery keys for %d messages", ref, len(ids), got)
		}
	}
	for _, ex := range allFixtures(t, "GET", func(p string) bool { return strings.HasPrefix(p, "/api/v1/pop/queue/") }) {
		if _, ok := want[ex.ref]; !ok {
			t.Errorf("pop exchange %s (%s) has no expectation", ex.ref, ex.Name)
		}
	}
}

// The redelivery keys recognise the same message popped again by the same
// consumer group, and only that.
func TestBillPopRedeliveryKeys(t *testing.T) {
	keys := func(ref string) map[string]bool {
		ex := fx(t, ref)
		_, ids := BillPop(ex.status(t), ex.body(t))
		set := map[string]bool{}
		for _, id := range ids {
			if set[id] {
				t.Fatalf("%s: key %s twice in one pop", ref, id)
			}
			set[id] = true
		}
		return set
	}
	overlap := func(a, b map[string]bool) int {
		n := 0
		for k := range a {
			if b[k] {
				n++
			}
		}
		return n
	}
	// S10 failed order-1002 popped in S8; S13 redelivers it.
	if n := overlap(keys("S8"), keys("S13")); n != 1 {
		t.Errorf("S8/S13 share %d keys, want 1 (the redelivered order-1002)", n)
	}
	// C74 failed dl-1 popped in C73; C75 redelivers it.
	if n := overlap(keys("C73"), keys("C75")); n != 1 {
		t.Errorf("C73/C75 share %d keys, want 1", n)
	}
	// Consumer group cg1 reading what queue mode read is a first delivery to cg1.
	if n := overlap(keys("C35"), keys("C49")); n != 0 {
		t.Errorf("queue mode C35 and group cg1 C49 share %d keys, want 0", n)
	}
	for k := range keys("C34") {
		if !strings.HasPrefix(k, "9827ba6f-7345-4942-8385-39c3bcb79254/") || !strings.HasSuffix(k, "/__QUEUE_MODE__") {
			t.Errorf("C34 key %q is not partitionId/transactionId/consumerGroup", k)
		}
	}
}

func TestBillPopEdgeCases(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		want   int64
		ids    []string
	}{
		{"204", 204, ``, 0, nil},
		{"5xx", 500, `{"messages":[{"id":"a"}]}`, 0, nil},
		{"400", 400, `{"messages":[{"id":"a"}]}`, 0, nil},
		{"messages missing", 200, `{"success":true}`, 0, nil},
		{"messages not an array", 200, `{"messages":{"id":"a"}}`, 0, nil},
		{"unreadable", 200, `{"messages":[`, 0, nil},
		{"ephemeral shape, ids only", 200, `{"messages":[{"id":"m1","data":1},{"id":"m2"}]}`, 2, []string{"id/m1/", "id/m2/"}},
		{"group from the top level", 200, `{"consumerGroup":"g","messages":[{"partitionId":"p","transactionId":"t"}]}`, 1, []string{"p/t/g"}},
		{"unidentifiable and null elements are counted, not keyed", 200, `{"messages":[{},null,{"partitionId":"p","transactionId":"t","consumerGroup":"g"}]}`, 3, []string{"p/t/g"}},
	}
	for _, c := range cases {
		got, ids := BillPop(c.status, []byte(c.body))
		if got != c.want || strings.Join(ids, ",") != strings.Join(c.ids, ",") {
			t.Errorf("%s: BillPop = %d %q, want %d %q", c.name, got, ids, c.want, c.ids)
		}
	}
}

// M5: streams cycle sink items of confirmed groups.
func TestBillCycleFixtures(t *testing.T) {
	ex := fx(t, "C170")
	groups := cycleGroups(t, ex.RequestBody)
	if len(groups) != 1 || groups[0] != (CycleGroup{"cat-sink", "acct-1", 1}) {
		t.Fatalf("C170 groups = %+v", groups)
	}
	if got := BillCycle(ex.status(t), ex.body(t), groups); got != 1 {
		t.Errorf("C170: BillCycle = %d, want 1", got)
	}
	// A failed cycle (200, success:false) bills nothing, even for sink groups.
	ex = fx(t, "C173")
	if got := BillCycle(ex.status(t), ex.body(t), []CycleGroup{{"cat-sink", "acct-1", 2}}); got != 0 {
		t.Errorf("C173: BillCycle = %d, want 0", got)
	}
	ex = fx(t, "C174")
	if got := BillCycle(ex.status(t), ex.body(t), []CycleGroup{{"cat-sink", "acct-1", 2}}); got != 0 {
		t.Errorf("C174 (400): BillCycle = %d, want 0", got)
	}
	// The sink queue must match: C170's confirmation says nothing about another queue.
	ex = fx(t, "C170")
	if got := BillCycle(ex.status(t), ex.body(t), []CycleGroup{{"other", "acct-1", 4}}); got != 0 {
		t.Errorf("C170 with another queue: BillCycle = %d, want 0", got)
	}
}

func TestBillCycleEdgeCases(t *testing.T) {
	g := func(q, p string, n int) CycleGroup { return CycleGroup{q, p, n} }
	cases := []struct {
		name   string
		status int
		body   string
		groups []CycleGroup
		want   int64
	}{
		{"named elements confirm whole groups", 200,
			`{"success":true,"push_results":[{"queue":"q","partition":"a","status":"queued"},{"queue":"q","partition":"b","status":"duplicate"}]}`,
			[]CycleGroup{g("q", "a", 3), g("q", "b", 2)}, 3},
		{"partition must match exactly", 200,
			`{"success":true,"push_results":[{"queue":"q","partition":"A","status":"queued"}]}`,
			[]CycleGroup{g("q", "a", 3)}, 0},
		{"recorded shape: one element per item, queue only", 200,
			`{"success":true,"push_results":[{"queueName":"q","partition_id":"x","status":"queued"},{"queueName":"q","status":"duplicate"},{"queueName":"q","status":"queued"}]}`,
			[]CycleGroup{g("q", "a", 2), g("q", "b", 1)}, 2},
		{"recorded shape never exceeds the request", 200,
			`{"success":true,"push_results":[{"queueName":"q","status":"queued"},{"queueName":"q","status":"queued"},{"queueName":"q","status":"queued"}]}`,
			[]CycleGroup{g("q", "Default", 2)}, 2},
		{"buffered confirms like M1", 200,
			`{"success":true,"push_results":[{"queue":"q","partition":"Default","status":"buffered"}]}`,
			[]CycleGroup{g("q", "Default", 1)}, 1},
		{"no push_results", 200, `{"success":true}`, []CycleGroup{g("q", "Default", 1)}, 0},
		{"success false", 200, `{"success":false,"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`, []CycleGroup{g("q", "Default", 1)}, 0},
		{"success missing", 200, `{"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`, []CycleGroup{g("q", "Default", 1)}, 0},
		{"no groups", 200, `{"success":true,"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`, nil, 0},
		{"unreadable", 200, `{"success":true,`, []CycleGroup{g("q", "Default", 1)}, 0},
		{"5xx", 503, `{"success":true,"push_results":[{"queue":"q","partition":"Default","status":"queued"}]}`, []CycleGroup{g("q", "Default", 1)}, 0},
	}
	for _, c := range cases {
		if got := BillCycle(c.status, []byte(c.body), c.groups); got != c.want {
			t.Errorf("%s: BillCycle = %d, want %d", c.name, got, c.want)
		}
	}
}

// M6: DLQ replay. The recorded broker (0.15.1) has neither replay route, so
// these bodies follow the reference's description.
func TestBillReplay(t *testing.T) {
	cases := []struct {
		name             string
		status           int
		body             string
		stored, readable bool
	}{
		{"moved", 200, `{"success":true,"result":"moved"}`, true, true},
		{"older broker without result", 200, `{"success":true}`, true, true},
		{"duplicate", 200, `{"success":true,"result":"duplicate"}`, false, true},
		{"another word", 200, `{"success":true,"result":"skipped"}`, false, true},
		{"result null", 200, `{"success":true,"result":null}`, false, true},
		{"success false", 200, `{"success":false,"error":"Message not found"}`, false, true},
		{"error body without success", 200, `{"error":"Message not found"}`, false, true},
		{"success as string", 200, `{"success":"true","result":"moved"}`, false, true},
		{"unreadable", 200, `{"success":tr`, false, false},
		{"not an object", 200, `[{"success":true}]`, false, false},
		{"empty 2xx body", 200, ``, false, false},
		{"404", 404, `<html>File Not Found</html>`, false, true},
		{"5xx", 500, `{"success":true,"result":"moved"}`, false, true},
	}
	for _, c := range cases {
		stored, readable := BillReplay(c.status, []byte(c.body))
		if stored != c.stored || readable != c.readable {
			t.Errorf("%s: BillReplay = %v, %v; want %v, %v", c.name, stored, readable, c.stored, c.readable)
		}
	}
}

// The acks of the recorded session carry no billable messages: the bill
// functions for pushes and pops read them as nothing.
func TestAckBodiesBillNothing(t *testing.T) {
	for _, ex := range allFixtures(t, "POST", func(p string) bool { return strings.HasPrefix(p, "/api/v1/ack") }) {
		if ex.Status == nil {
			continue // C70: never answered
		}
		if n := BillPush(ex.status(t), ex.body(t)); n != 0 {
			t.Errorf("ack seq %d read as %d pushed messages", ex.Seq, n)
		}
		if n, _ := BillPop(ex.status(t), ex.body(t)); n != 0 {
			t.Errorf("ack seq %d read as %d delivered messages", ex.Seq, n)
		}
	}
}

// TestAnswersAreReadByTheBrokersRules: every answer is read by the rules of
// answers (doc.go): member names exactly as the broker writes them, the
// last of a repeated member, and nothing billed from a text wire.Check
// refuses, whichever reading bills it.
func TestAnswersAreReadByTheBrokersRules(t *testing.T) {
	groups := []CycleGroup{{Queue: "q", Partition: "p", Items: 2}}
	cycle := func(body string) int64 { return BillCycle(200, []byte(body), groups) }
	for _, c := range []struct {
		name string
		got  int64
		want int64
	}{
		{"cycle", cycle(`{"success":true,"push_results":[{"status":"queued","queue":"q","partition":"p"}]}`), 2},
		{"cycle, escaped values", cycle(`{"success":true,"push_results":[{"status":"qu\u0065ued","queue":"\u0071","partition":"p"}]}`), 2},
		{"cycle, Success", cycle(`{"Success":true,"push_results":[{"status":"queued","queue":"q","partition":"p"}]}`), 0},
		{"cycle, Push_Results", cycle(`{"success":true,"Push_Results":[{"status":"queued","queue":"q","partition":"p"}]}`), 0},
		{"cycle, Status", cycle(`{"success":true,"push_results":[{"Status":"queued","queue":"q","partition":"p"}]}`), 0},
		{"cycle, the last success", cycle(`{"success":true,"success":false,"push_results":[{"status":"queued","queue":"q","partition":"p"}]}`), 0},
		{"cycle, bad UTF-8", cycle("{\"success\":true,\"push_results\":[{\"status\":\"queued\",\"queue\":\"q\",\"partition\":\"p\",\"x\":\"\xff\"}]}"), 0},
		{"cycle, half a surrogate pair", cycle(`{"success":true,"push_results":[{"status":"queued","queue":"q","partition":"p","x":"\ud800"}]}`), 0},
		{"ephemeral push", BillEphemeralPush(200, []byte(`{"pushed":3}`)), 3},
		{"ephemeral push, Pushed", BillEphemeralPush(200, []byte(`{"Pushed":3}`)), 0},
		{"ephemeral push, the last pushed", BillEphemeralPush(200, []byte(`{"pushed":3,"pushed":1}`)), 1},
		{"ephemeral push, bad UTF-8", BillEphemeralPush(200, []byte("{\"pushed\":3,\"x\":\"\xc0\"}")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: billed %d, want %d", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		body             string
		stored, readable bool
	}{
		{`{"success":true,"result":"moved"}`, true, true},
		{`{"Success":true,"result":"moved"}`, false, true},
		{`{"success":true,"Result":"duplicate"}`, true, true},
		{`{"success":true,"result":"duplicate","result":"moved"}`, true, true},
		{"{\"success\":true,\"x\":\"\xff\"}", false, false},
		{`{"success":true,"x":"\udc00"}`, false, false},
	} {
		stored, readable := BillReplay(200, []byte(c.body))
		if stored != c.stored || readable != c.readable {
			t.Errorf("replay %q: stored %v readable %v, want %v %v", c.body, stored, readable, c.stored, c.readable)
		}
	}
}
