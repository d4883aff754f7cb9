package transcript

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// DefaultWriteTimeout bounds each transcript write of Record, which runs on a
// context that the caller's cancellation does not reach.
const DefaultWriteTimeout = 30 * time.Second

// Recording is one child's provider stream, for Record.
type Recording struct {
	// Header is the new transcript's header; Header.Provider names the
	// stream's shape.
	Header Header
	// Stream is the provider's event stream, read line by line as it arrives.
	Stream io.Reader
	// Normalizer reads Stream; nil means NewNormalizer(Header.Provider).
	Normalizer Normalizer
	// Prompt, when not empty, is recorded as the child's first message, for
	// streams that do not echo the prompt they were given.
	Prompt string
	// WriteTimeout bounds each create, append and finish (0: DefaultWriteTimeout).
	WriteTimeout time.Duration
}

// RecordResult is what Record did.
type RecordResult struct {
	// End is the terminal record the transcript was finished with.
	End End
	// Outcome is how the provider stream said the run ended.
	Outcome Outcome
	// Paths are the transcript's two files.
	Paths Paths
	// Lost reports that a transcript write itself failed, not only its
	// record in background_agent_log: the transcript on disk lacks events,
	// its end, or everything.
	Lost bool
	// Finished reports that the transcript's document is published: with
	// Lost, the transcript is incomplete rather than not written.
	Finished bool
}

// Record records a child's provider stream as its transcript: it creates the
// transcript (before the child's first provider turn, requirement 1), appends
// each record's events as the record arrives, and finishes it, exactly once,
// with the outcome the provider reported.
//
// ctx stops the reading of the stream, at once even while the stream stays
// open, and never a write: every create, append and finish runs on a context
// ctx's cancellation does not reach, bounded by WriteTimeout, so the
// transcript and its lifecycle row reach the same terminal status. Stopped
// before the stream ended, the transcript ends TimedOut when ctx's deadline
// passed and Cancelled otherwise — unless the provider had already reported
// its run completed: that work was done. A cause the caller gave ctx
// (context.WithTimeoutCause, a signal's) is kept in the error text.
//
// The error is nil when every write succeeded and the stream held a record
// of its provider. A Create refused with ErrInvalidID or ErrExists is
// returned at once, nothing written. Any other failure does not stop the
// recording — the child's work goes on without its transcript, and the
// lifecycle still reaches its terminal status — and the error is the
// errors.Join of each, in order: a failed write, or a stream none of whose
// lines was the provider's (ErrNoRecords; the transcript ends Failed, saying
// how many lines were ignored). A stream that could not be read is the
// child's outcome, not Record's failure: the transcript ends Failed.
func Record(ctx context.Context, s *Store, r Recording) (RecordResult, error) {
	var res RecordResult
	n, err := r.normalizer()
	if err != nil {
		return res, err
	}
	p, err := s.PathsFor(r.Header.ParentSessionID, r.Header.AgentID)
	if err != nil {
		return res, err
	}
	res.Paths = p
	write := detachedWrites(ctx, r.WriteTimeout)
	var failures []error
	failed := func(err error) {
		failures = append(failures, err)
		res.Lost = res.Lost || fileFailed(err)
	}

	if err := write(func(c context.Context) error { return s.Create(c, r.Header) }); err != nil {
		if errors.Is(err, ErrInvalidID) || errors.Is(err, ErrExists) {
			return res, err
		}
		failed(err)
	}
	session, agent := r.Header.ParentSessionID, r.Header.AgentID
	appendOr := func(evs ...Event) {
		if err := write(func(c context.Context) error { return s.Append(c, session, agent, evs...) }); err != nil {
			failed(err)
		}
	}
	if r.Prompt != "" {
		appendOr(Event{Type: UserMessage, Text: r.Prompt})
	}
	streamErr, stopped := readStream(ctx, r.Stream, r.Header.Provider, n, appendOr)
	rest, out := n.Close()
	appendOr(rest...)
	res.Outcome = out
	res.End = outcomeEnd(out, streamErr, stopped, context.Cause(ctx))
	if stopped == nil && streamErr == nil && out.Records == 0 {
		// Not one line was the provider's: a loud error, never a quiet
		// transcript that reads like a run that merely ended early.
		failures = append(failures, fmt.Errorf("%w: %s", ErrNoRecords, out.Error))
	}
	if err := write(func(c context.Context) error { return s.Finish(c, session, agent, res.End) }); err != nil {
		failed(err)
	}
	if _, err := os.Lstat(p.Transcript); err == nil {
		res.Finished = true
	}
	return res, errors.Join(failures...) // nil when nothing failed
}

// normalizer is r.Normalizer, or when it is nil the one r.Header.Provider
// names.
func (r Recording) normalizer() (Normalizer, error) {
	if r.Normalizer != nil {
		return r.Normalizer, nil
	}
	return NewNormalizer(r.Header.Provider)
}

// detachedWrites returns how Record runs each transcript write: under a
// context ctx's cancellation does not reach, so a stopped child's transcript
// still ends, bounded by timeout (DefaultWriteTimeout when not positive),
// so a stuck file system cannot hold the recording forever.
func detachedWrites(ctx context.Context, timeout time.Duration) func(op func(context.Context) error) error {
	if timeout <= 0 {
		timeout = DefaultWriteTimeout
	}
	return func(op func(context.Context) error) error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		return op(wctx)
	}
}

// readStream feeds the provider stream, line by line as it arrives, to n and
// each record's events to appendFn, until the stream ends (streamErr: a read
// or parse error, nil at EOF) or ctx is done (stopped: ctx's error). A read
// blocked on a stream that stays open does not delay a stop: the read goes
// on in its own goroutine, which is abandoned.
func readStream(ctx context.Context, r io.Reader, provider string, n Normalizer, appendFn func(...Event)) (streamErr, stopped error) {
	lines := make(chan []byte)
	done := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-quit:
				return
			}
		}
		done <- sc.Err()
	}()
	for line := 1; ; {
		// A stop already signalled wins over lines still arriving.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		select {
		case b := <-lines:
			evs, err := n.Feed(b)
			if err != nil {
				return fmt.Errorf("%s stream line %d: %w", provider, line, err), nil
			}
			appendFn(evs...)
			line++
		case err := <-done:
			// A stream that ended as the stop came (a process group
			// signalled at once: the provider died of it too) was stopped.
			return err, ctx.Err()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// outcomeEnd is the transcript's terminal record, decided once. A stream
// that could not be read ends failed. A recording stopped before the stream
// ended ends cancelled or, past its deadline, timed_out — unless the
// provider had already reported its run completed. cause is the stopped
// context's cause.
func outcomeEnd(out Outcome, streamErr, stopped, cause error) End {
	end := End{Status: out.Status, Error: out.Error, Model: out.Model}
	switch {
	case streamErr != nil:
		end.Status, end.Error = Failed, "reading the provider stream: "+streamErr.Error()
	case stopped != nil && out.Status != Completed:
		given := cause != nil && cause != context.Canceled && cause != context.DeadlineExceeded
		switch {
		case errors.Is(stopped, context.DeadlineExceeded) && given:
			end.Status, end.Error = TimedOut, "timed out: "+cause.Error()
		case errors.Is(stopped, context.DeadlineExceeded):
			end.Status, end.Error = TimedOut, "timed out: the provider stream had not ended by the recording's deadline"
		case given:
			end.Status, end.Error = Cancelled, "cancelled: the recording was stopped before the provider stream ended ("+cause.Error()+")"
		default:
			end.Status, end.Error = Cancelled, "cancelled: the recording was stopped before the provider stream ended"
		}
		if out.Records > 0 && out.Error != "" {
			end.Error += " (the stream so far: " + out.Error + ")"
		}
	}
	return end
}

// fileFailed reports whether err is more than a failure to record an outcome
// in background_agent_log (ErrLifecycle alone): a transcript write itself
// failed.
func fileFailed(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 1 {
		return true
	}
	return !errors.Is(err, ErrLifecycle)
}
