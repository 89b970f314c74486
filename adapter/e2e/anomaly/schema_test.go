package anomaly_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/ceprops"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// The schema 2 this test imagines: the payload's "seq" is renamed
// "sequence" and, in half of the events, the aggregatetype extension is
// renamed aggregatekind. Schema 1 code reading the first change would apply
// sequence 0; reading the second it would see a missing attribute.
type payloadV2 struct {
	Run      string `json:"run"`
	Sequence int    `json:"sequence"`
}

// sendV2 publishes a schema 2 event of sequence seq, as a producer already
// upgraded would, and returns its event id.
func sendV2(t *testing.T, k *kernel, seq int) string {
	t.Helper()
	env := k.event(t, seq, kindNormal).Envelope
	ev, err := env.ToCloudEvent()
	require.NoError(t, err)
	ev.SetExtension(envelope.ExtSchemaVersion, 2)
	if seq%2 == 1 {
		ev.SetExtension(envelope.ExtAggregateType, nil)
		ev.SetExtension("aggregatekind", env.AggregateType)
	}
	require.NoError(t, ev.SetData("application/json", payloadV2{Run: k.run, Sequence: seq}))
	_, err = cerocketmq.NewSender(k.producer, k.topic.BrokerName()).SendMessage(context.Background(), binding.ToMessage(&ev))
	require.NoError(t, err)
	return ev.ID()
}

// nextBuild stands in for the next release of the adapter and stage, which
// reads schema 2 as well as 1. It is this build with a schema 2 reader in
// front: it turns each schema 2 message it receives into the schema 1 event
// that means the same, which this build's adapter and stage then handle.
type nextBuild struct{ mq.Consumer }

func (n nextBuild) Receive(ctx context.Context, max int, invisible time.Duration) ([]*mq.Received, error) {
	msgs, err := n.Consumer.Receive(ctx, max, invisible)
	for _, m := range msgs {
		props := m.Properties
		if props[ceprops.Prefix+envelope.ExtSchemaVersion] != "2" {
			continue
		}
		props[ceprops.Prefix+envelope.ExtSchemaVersion] = "1"
		if kind, ok := props[ceprops.Prefix+"aggregatekind"]; ok {
			props[ceprops.Prefix+envelope.ExtAggregateType] = kind
			delete(props, ceprops.Prefix+"aggregatekind")
		}
		var v2 payloadV2
		if json.Unmarshal(m.Body, &v2) == nil {
			m.Body, _ = json.Marshal(payload{Run: v2.Run, Seq: v2.Sequence})
		}
	}
	return msgs, err
}

// TestAnomalySchemaUpgradeOldAndNewConsumersSideBySide: the row "schema
// upgrade with old and new consumers side by side", on the emulator.
//
// A rolling upgrade of one consumer group whose producer already writes
// schema 2. Before: only the old consumer (this build, schema 1) runs; it
// quarantines every schema 2 event with the class unsupported_schema, and
// never applies one, whatever else the new schema changed, while schema 1
// events keep flowing. During: old and new consumers share the group; each
// schema 2 event is either applied, correctly, by the new one or
// quarantined by the old one, never both and never lost. After: only the
// new consumer runs and applies them all. Every schema 1 event has its
// effect exactly once throughout. (Once the upgrade is done, an operator
// replays what the old consumer quarantined: docs/operations.md "Quarantine and
// replay".)
func TestAnomalySchemaUpgradeOldAndNewConsumersSideBySide(t *testing.T) {
	t.Parallel()
	k := newEmulator(t, "schema", 16)
	obs := newObserver()
	k.startRelay(t, k.producer, k.run)
	oldConsumer, oldLeave := k.consumer(t)
	oldStop := k.startSource(t, oldConsumer, (&effectStage{k: k, label: "old", obs: obs}).function())

	seq := 0
	seqOf := map[string]int{} // of each schema 2 event
	// phase writes v1 schema 1 events and sends v2 schema 2 events, and
	// returns their ids.
	phase := func(v1, v2 int) (ones, twos []string) {
		events := k.events(t, seq, v1, kindNormal)
		seq += v1
		k.write(t, events)
		for range v2 {
			id := sendV2(t, k, seq)
			seqOf[id] = seq
			twos = append(twos, id)
			seq++
		}
		return ids(events), twos
	}
	// settled waits until each schema 2 event of twos has an effect or a
	// quarantine row.
	settled := func(twos []string) {
		require.Eventually(t, func() bool {
			effects, rows := k.effects(t), k.quarantine(t)
			for _, id := range twos {
				if effects[id] == 0 && rows[id].eventID == "" {
					return false
				}
			}
			return true
		}, 30*time.Second, 20*time.Millisecond)
	}

	// Before: the producer was upgraded first.
	before1, before2 := phase(20, 10)
	k.waitForEffects(t, before1, 30*time.Second)
	settled(before2)

	// During: the new consumer joins the group.
	newConsumer, _ := k.consumer(t)
	k.startSource(t, nextBuild{newConsumer}, (&effectStage{k: k, label: "new", obs: obs}).function())
	during1, during2 := phase(40, 20)
	k.waitForEffects(t, during1, 30*time.Second)
	settled(during2)

	// After: the old consumer is gone.
	oldStop()
	oldLeave()
	after1, after2 := phase(20, 10)
	k.waitForEffects(t, slices.Concat(after1, after2), 30*time.Second)
	time.Sleep(k.invisible + k.lag)

	ones := slices.Concat(before1, during1, after1)
	effects, rows := k.effects(t), k.quarantine(t)
	for _, id := range ones {
		require.Equal(t, 1, effects[id], "schema 1 event %s has its effect once", id)
		require.Empty(t, rows[id].eventID, "schema 1 event %s is not quarantined", id)
	}
	requireQuarantinedForSchema := func(id string) {
		t.Helper()
		q := rows[id]
		require.Equal(t, id, q.eventID, "schema 2 event %s is quarantined", id)
		require.Equal(t, string(outcome.ClassPermanent), q.errorClass)
		require.Equal(t, "envelope.unsupported_schema", q.errorCode, "event %s: %s", id, q.errorDetail)
		require.Equal(t, "envelope: schemaversion: 2 is not supported (supported: 1)", q.errorDetail)
		require.Equal(t, string(quarantine.SourceAdapter), q.source)
		require.Equal(t, 1, q.attempt, "a permanent refusal is not retried")
	}
	for _, id := range before2 {
		require.Zero(t, effects[id], "the old consumer never applies schema 2 event %s", id)
		require.Zero(t, obs.of(id).deliveries, "schema 2 event %s never reaches the old stage: its adapter refuses it", id)
		requireQuarantinedForSchema(id)
	}
	appliedDuring := 0
	for _, id := range during2 {
		if effects[id] == 0 {
			requireQuarantinedForSchema(id)
			continue
		}
		appliedDuring++
		require.Equal(t, 1, effects[id], "schema 2 event %s has its effect once", id)
		require.Empty(t, rows[id].eventID, "schema 2 event %s is applied or quarantined, not both", id)
	}
	t.Logf("during the upgrade the new consumer applied %d of %d schema 2 events; the old one quarantined the rest", appliedDuring, len(during2))
	for _, id := range after2 {
		require.Equal(t, 1, effects[id], "schema 2 event %s has its effect once", id)
		require.Empty(t, rows[id].eventID)
	}

	// Applied schema 2 events were read the schema 2 way, by the new
	// consumer only.
	applied, err := k.pool.Query(context.Background(), `SELECT event_id::text, seq, applied_by FROM effects`)
	require.NoError(t, err)
	for applied.Next() {
		var id, by string
		var s int
		require.NoError(t, applied.Scan(&id, &s, &by))
		if want, two := seqOf[id]; two {
			require.Equal(t, "new", by, "schema 2 event %s applied by the new consumer", id)
			require.Equal(t, want, s, "schema 2 event %s applied with its own sequence", id)
		}
	}
	require.NoError(t, applied.Err())
}
