package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// writeQuarantine records a poison message in message_quarantine; the
// write is idempotent, and counted only when it added a row.
func (s *Source) writeQuarantine(ctx context.Context, a *attempt, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	_, code := outcome.Of(cause)
	msg := a.msg
	entry := quarantine.Entry{
		Consumer:        s.p.Group.Name,
		MessageID:       msg.MessageID,
		Topic:           msg.Topic,
		Tag:             msg.Tag,
		ErrorClass:      string(outcome.ClassPermanent),
		ErrorCode:       code,
		ErrorDetail:     cause.Error(),
		DeliveryAttempt: msg.DeliveryAttempt,
		Keys:            msg.Keys,
		Properties:      msg.Properties,
		Body:            msg.Body,
		Source:          quarantine.SourceAdapter,
	}
	if a.ev != nil {
		entry.EventID = a.ev.ID()
	}
	written, err := quarantine.Write(ctx, s.p.Quarantine, entry)
	if err != nil {
		return err
	}
	if written {
		s.p.Metrics.quarantined.WithLabelValues(s.p.Group.Name, code).Inc()
	}
	return nil
}

// failureRecordTimeout bounds writing or dropping a failure record: when
// the database is what fails, the record must not hold up the retry.
const failureRecordTimeout = 2 * time.Second

// recordFailure keeps the handler's error of a delivery that will be
// retried, so that if the broker gives up on the message and moves it to
// the dead-letter topic, its quarantine row says why. It is written before
// the message goes back to the broker, which moves it only after that.
// Failing to record costs only the explanation: the retry goes ahead.
func (s *Source) recordFailure(ctx context.Context, a *attempt, cause error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureRecordTimeout)
	defer cancel()
	_, code := outcome.Of(cause)
	f := quarantine.Failure{Consumer: s.p.Group.Name, MessageID: a.msg.MessageID, Code: code, Detail: cause.Error()}
	if a.ev != nil {
		f.EventID = a.ev.ID()
	}
	if err := quarantine.RecordFailure(rctx, s.p.Quarantine, f); err != nil {
		a.logger().WarnContext(ctx, "could not record the failed delivery; a dead letter would not say why", slog.String("error", err.Error()))
	}
}

// forgetFailures drops the failure record of a redelivered message that
// was settled after all.
func (s *Source) forgetFailures(ctx context.Context, a *attempt) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureRecordTimeout)
	defer cancel()
	if err := quarantine.ForgetFailure(rctx, s.p.Quarantine, s.p.Group.Name, a.msg.MessageID); err != nil {
		a.logger().WarnContext(ctx, "could not drop the failure record of a settled message; the reconciler prunes it", slog.String("error", err.Error()))
	}
}
