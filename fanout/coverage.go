package fanout

import (
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/keys"
)

// Coverage is what the activation keys say about the counts: the boundaries a
// consumer publishing them must disclose (AC-25), read per AC-24c's four
// states and AC-24f's empty backfill_through. The keys bound completeness,
// never validity: every row counts, whichever side of a key it falls on.
type Coverage struct {
	// TablePresent is false when task_session_subagents does not exist:
	// there are no rows to count.
	TablePresent bool `json:"table_present"`
	// PredatesAmendment is true when the table has no agent_execution_id
	// column (installed-base state 3, before its first reconcile): its rows
	// read with the 'unknown' sentinel the reconcile gives them (AC-31).
	PredatesAmendment bool `json:"predates_amendment"`
	// KeysRead is false when kandev_meta does not exist: every key reads as
	// absent.
	KeysRead bool     `json:"keys_read"`
	Keys     keys.Set `json:"keys"`
	// State is the AC-24c classification of the keys.
	State keys.State `json:"state"`
	// CompleteFrom is capture_since: from it on, the absence of a row is the
	// absence of a subagent. nil when capture_since is absent, and then no
	// absence is evidence of anything and all fan-out is unknown (AC-24c).
	CompleteFrom *string `json:"complete_from"`
	// FanoutUnknownBefore is the instant before which a session's fan-out is
	// unknown, not zero (AC-25): backfill_through when it names one, or
	// capture_since when backfill_through is absent beside it (a partial key
	// pair, which the next boot completes). nil when there is no such
	// window (backfill_through is the '' sentinel) or no boundary at all
	// (capture_since absent: see AllFanoutUnknown).
	FanoutUnknownBefore *string `json:"fanout_unknown_before"`
	// NothingToBackfill is true when backfill_through is the '' sentinel
	// (AC-24f): the backfill matched nothing, so no pre-capture history is
	// claimed as covered and none needs to be. It is not "no boundary is
	// known", and history after capture_since has known fan-out.
	NothingToBackfill bool `json:"nothing_to_backfill"`
	// AllFanoutUnknown is true when capture_since is absent: the backfill
	// has not succeeded and no coverage boundary exists (AC-24c).
	AllFanoutUnknown bool `json:"all_fanout_unknown"`
	// ExecutionIdentityFrom is execution_since: 'unknown' rows observed
	// before it are legacy rows, from it on live frames without an id.
	// nil when absent, and then no agent_execution_id is an identity (AC-24b).
	ExecutionIdentityFrom *string `json:"execution_identity_from"`
	// Disclosures says the above as sentences, in a fixed order, for a
	// consumer to publish beside the counts.
	Disclosures []string `json:"disclosures"`
}

// fill derives the boundaries and the disclosures from the keys and s's counts.
func (c *Coverage) fill(s *Summary) {
	k := c.Keys
	c.State = k.State()
	c.CompleteFrom, c.ExecutionIdentityFrom = k.CaptureSince, k.ExecutionSince
	c.AllFanoutUnknown = k.CaptureSince == nil
	switch {
	case c.AllFanoutUnknown:
	case k.BackfillThrough == nil:
		c.FanoutUnknownBefore = k.CaptureSince
	case *k.BackfillThrough == "":
		c.NothingToBackfill = true
	default:
		c.FanoutUnknownBefore = k.BackfillThrough
	}

	var d []string
	if !c.KeysRead {
		d = append(d, fmt.Sprintf("%s does not exist: every activation key reads as absent.", keys.MetaTable))
	}
	switch {
	case c.AllFanoutUnknown:
		d = append(d, "capture_since is absent: the backfill has not succeeded, no coverage boundary exists, and all fan-out is unknown — no absence of a row is evidence of anything (AC-24c).")
	case c.NothingToBackfill:
		d = append(d, fmt.Sprintf("Complete from capture_since %s; before it, absence of a row is not evidence of absence of a subagent (AC-25).", *c.CompleteFrom))
		d = append(d, "backfill_through is '': the backfill matched nothing, so no pre-capture history is claimed as covered and none needs to be; history after capture_since has known fan-out (AC-24f).")
	case k.BackfillThrough == nil:
		d = append(d, fmt.Sprintf("Complete from capture_since %s; fan-out before it is unknown, not zero: backfill_through is absent (a partial key pair the next boot completes) (AC-25, AC-24d).", *c.CompleteFrom))
	default:
		d = append(d, fmt.Sprintf("Complete from capture_since %s; before it, absence of a row is not evidence of absence of a subagent (AC-25).", *c.CompleteFrom))
		d = append(d, fmt.Sprintf("Fan-out of activity before backfill_through %s is unknown, not zero: backfilled rows hold only what survived in message metadata (AC-25).", *c.FanoutUnknownBefore))
	}
	if c.ExecutionIdentityFrom == nil {
		d = append(d, "execution_since is absent: no agent_execution_id on this installation is an execution identity, and executions are not counted (AC-24b).")
	} else {
		d = append(d, fmt.Sprintf("Execution identity from execution_since %s: 'unknown' rows before it predate the execution dimension (%d unrecorded_legacy), 'unknown' live rows from it on arrived without an id (%d unrecorded_live), backfilled rows never carry one (%d unrecorded_backfill); real ids count on either side (%d real). Executions compared across it disclose this split (AC-25).",
			*c.ExecutionIdentityFrom, s.ByIdentity[UnrecordedLegacy], s.ByIdentity[UnrecordedLive], s.ByIdentity[UnrecordedBackfill], s.ByIdentity[Real]))
	}
	for _, key := range []struct {
		name  string
		value *string
	}{{"capture_since", k.CaptureSince}, {"backfill_through", k.BackfillThrough}, {"execution_since", k.ExecutionSince}} {
		if secondPrecision(key.value) {
			d = append(d, fmt.Sprintf("%s %s is at second precision (written by an earlier build and never rewritten): that boundary is ambiguous by up to one second (AC-24 point 5).", key.name, *key.value))
		}
	}
	d = append(d, fmt.Sprintf("Provenance: %d live, %d backfill; backfilled rows hold only what survived in message metadata and are not comparable like-for-like with live rows (AC-25).",
		s.BySource[SourceLive], s.BySource[SourceBackfill]))
	if !c.TablePresent {
		d = append(d, "task_session_subagents does not exist: there are no rows, which is not evidence of no fan-out.")
	}
	if c.PredatesAmendment {
		d = append(d, "task_session_subagents predates the amendment (no agent_execution_id column): its rows read as 'unknown', the value the reconcile gives them (AC-31).")
	}
	c.Disclosures = d
}

// secondPrecision reports a key value with no fractional second: one an
// earlier build wrote with time.RFC3339. This build writes nine digits,
// zeros included.
func secondPrecision(v *string) bool {
	if v == nil || *v == "" {
		return false
	}
	_, err := instant.Parse(*v)
	return err == nil && !strings.Contains(*v, ".")
}
