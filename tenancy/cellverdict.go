package tenancy

// The operator's statement of a cell's tenancy (cells.tenancy_stated,
// ProbeCell.Tenancy).
const (
	// StatedProbe: the probe decides (the default; also any value the
	// gateway does not know).
	StatedProbe = "probe"
	// StatedScoped: the operator says the broker keeps tenants apart. All
	// clusters are served unless a decided probe finds otherwise, which is
	// a contradiction the gateway reports loudly.
	StatedScoped = "scoped"
	// StatedUnscoped: the operator says the broker does not. Only the
	// keeper is served, whatever a probe would find, so it is not probed.
	StatedUnscoped = "unscoped"
)

// DefaultProbeConfirmations is how many probes in a row, each with fresh
// random names, must say scoped before a cell that was unscoped or
// unknown is served as scoped.
const DefaultProbeConfirmations = 3

// cellJudgement turns a cell's probe results into the verdict the gateway
// acts on. Its rules, in order of strength:
//
//   - stated unscoped is the verdict, always;
//   - one decided unscoped probe makes the cell unscoped at once (a tenant
//     cannot fake one: it would have to put a queue of a random name
//     under a random tenant id); under a stated scoped, that is a
//     contradiction;
//   - going up to scoped from unscoped or unknown takes `need` scoped
//     probes in a row; an undecided one breaks the run;
//   - a cell already scoped stays so on a scoped probe; an undecided probe
//     makes a probed cell unknown, but leaves a stated scoped one (not
//     contradicted) scoped: the operator's word stands until a probe
//     disproves it.
type cellJudgement struct {
	verdict      TenantScoping
	streak       int  // scoped probes in a row
	contradicted bool // stated scoped, and a decided probe found unscoped
	// tried: a probe ran since the last reset. A stated scoped cell is not
	// served as scoped before its first probe, so that a misstatement is
	// caught before a second cluster is served.
	tried bool
}

// newJudgement is the verdict of a cell just seen (or reset).
func newJudgement(stated string) cellJudgement {
	if stated == StatedUnscoped {
		return cellJudgement{verdict: ScopingUnscoped, tried: true}
	}
	return cellJudgement{verdict: ScopingUnknown}
}

// apply takes one probe result; it reports whether another probe should
// follow at once (a run of confirmations not yet complete).
func (j *cellJudgement) apply(stated string, probed TenantScoping, need int) (more bool) {
	if stated == StatedUnscoped {
		*j = newJudgement(stated)
		return false
	}
	j.tried = true
	switch probed {
	case ScopingUnscoped:
		j.streak = 0
		j.verdict = ScopingUnscoped
		j.contradicted = stated == StatedScoped
	case ScopingScoped:
		j.streak++
		switch {
		case j.verdict == ScopingScoped:
		case stated == StatedScoped && !j.contradicted:
			j.verdict = ScopingScoped
		case j.streak >= need:
			j.verdict, j.contradicted = ScopingScoped, false
		default:
			return true
		}
	default:
		j.streak = 0
		if stated == StatedScoped && !j.contradicted {
			j.verdict = ScopingScoped
		} else if !j.contradicted {
			j.verdict = ScopingUnknown
		}
	}
	return false
}

// settled reports whether a request waiting for the cell's first verdict
// may stop waiting: the verdict is decided, or (stated scoped) a probe ran.
func (j *cellJudgement) settled() bool {
	return j.tried && (j.verdict != ScopingUnknown || j.contradicted)
}
