package transcript_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/schemastate/schemastate/transcript"
)

// BenchmarkStore_Append measures one durable (fsynced) append of a ~1 KiB
// assistant message to logs that already hold 0 and 20,000 events. The two
// should cost the same: an append never reads or rewrites the whole
// transcript.
//
//	go test -run '^$' -bench Append -benchtime 2000x ./transcript/
func BenchmarkStore_Append(b *testing.B) {
	text := strings.Repeat("y", 1024)
	for _, existing := range []int{0, 20000} {
		b.Run(fmt.Sprintf("existing=%d", existing), func(b *testing.B) {
			s, err := transcript.NewStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			h := transcript.Header{ParentSessionID: "s", AgentID: "a", Kind: transcript.KindRunInBackground}
			if err := s.Create(ctx, h); err != nil {
				b.Fatal(err)
			}
			batch := make([]transcript.Event, 1000)
			for i := range batch {
				batch[i] = transcript.Event{Type: transcript.AssistantMessage, Text: text}
			}
			for n := 0; n < existing; n += len(batch) {
				if err := s.Append(ctx, "s", "a", batch...); err != nil {
					b.Fatal(err)
				}
			}
			e := transcript.Event{Type: transcript.AssistantMessage, Text: text}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Append(ctx, "s", "a", e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
