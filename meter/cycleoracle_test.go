package meter

import "github.com/queengate/queengate/wire"

// The reading of cycle and replay answers CycleTally and ReplayTally
// replaced: over a whole answer, with wire's walkers. It stays as the
// oracle they are fuzzed against (FuzzCycleAnswer, FuzzReplayAnswer).

func oracleBillCycle(status int, body []byte, groups []CycleGroup) int64 {
	if !is2xx(status) || len(groups) == 0 {
		return 0
	}
	var top [2][]byte
	if !wire.TopMembers(body, []string{"success", "push_results"}, top[:]) || string(top[0]) != "true" {
		return 0
	}
	type qp struct{ queue, partition string }
	named := map[qp]bool{}
	anonymous := map[string]int{} // queue -> confirmed items without a partition name
	results := top[1]
	if len(results) == 0 || results[0] != '[' {
		results = []byte("[]") // absent, or not an array: nothing confirmed
	}
	var res [4][]byte // status, queue, queueName, partition
	wire.Elements(results, 0, func(at int) int {
		end := wire.ValueEnd(results, at)
		if results[at] != '{' {
			return end
		}
		res = [4][]byte{}
		wire.MemberValues(results, at, []string{"status", "queue", "queueName", "partition"}, res[:])
		if status, _ := wire.StringValue(res[0]); status != "queued" && status != "buffered" {
			return end
		}
		queue, ok := wire.StringValue(res[1])
		if !ok {
			if queue, ok = wire.StringValue(res[2]); !ok {
				return end
			}
		}
		if partition, ok := wire.StringValue(res[3]); ok {
			named[qp{queue, partition}] = true
		} else {
			anonymous[queue]++
		}
		return end
	})
	var billed int64
	for _, g := range groups {
		if g.Items <= 0 {
			continue
		}
		if named[qp{g.Queue, g.Partition}] {
			billed += int64(g.Items)
			continue
		}
		if n := anonymous[g.Queue]; n > 0 {
			take := min(n, g.Items)
			anonymous[g.Queue] = n - take
			billed += int64(take)
		}
	}
	return billed
}

func oracleBillReplay(status int, body []byte) (stored, readable bool) {
	if !is2xx(status) {
		return false, true
	}
	var top [2][]byte
	if !wire.TopMembers(body, []string{"success", "result"}, top[:]) {
		return false, false
	}
	if string(top[0]) != "true" {
		return false, true
	}
	return top[1] == nil || string(top[1]) == `"moved"`, true
}
