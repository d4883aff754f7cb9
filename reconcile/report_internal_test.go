package reconcile

import "testing"

// stepsMax sizes every report's steps once: it is the step table's length.
func TestStepsMax_IsTheStepTable(t *testing.T) {
	if n := len(bootSteps()); n != stepsMax {
		t.Fatalf("the step table has %d rows, stepsMax says %d", n, stepsMax)
	}
}
