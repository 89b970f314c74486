// Package anomaly holds the tests of the seed's anomaly table (issue #5,
// item 6): a test for each row that no other test covered, named after the
// row, and below, for every row, the tests that cover it.
//
// It holds tests only. Each scenario is written once against a kernel: a
// database schema of its own, the outbox relay, source adapters of one
// consumer group delivering in process to a stage whose business effect is
// one row per event in an inbox transaction, and the DLQ drainer where the
// row needs it. It runs on the broker emulator (adapter/mq/memmq) as
// TestAnomaly*, in the -race pass, and, where the row is about the broker,
// on the real RocketMQ proxy as well, as TestRealBroker* in files built
// without -race (the client's own data races: adapter/mq/rocketmq). Every
// test asserts that each business effect happened exactly once, or that the
// message was quarantined with the right class, and that nothing was lost.
//
// # The rows and their tests
//
// Tests without a package are in this one.
//
//   - DB committed and relay died before send: TestAnomalyRelayDiedBeforeSend
//     (deterministic: the rows wait out the dead relay's lease);
//     adapter/e2e TestRealBrokerSIGKILL (relay killed at random moments).
//   - Broker got it and relay timed out: TestAnomalyBrokerGotItAndRelayTimedOut;
//     adapter/e2e TestRealBrokerExactlyOnceUnderFaults (lost published marks).
//   - Consumer committed and died before ACK: adapter/e2e
//     TestRealBrokerExactlyOnceUnderFaults (ACKs lost after the commit) and
//     TestRealBrokerSIGKILL (source killed at random moments); adapter/dlq
//     TestDrainerKilledBetweenWriteAndAckLosesNothing (the drainer's own).
//   - Handler slower than the invisible time:
//     TestAnomalyHandlerSlowerThanInvisibleTime,
//     TestRealBrokerHandlerSlowerThanInvisibleTime.
//   - Duplicate or reordered delayed polls: functions/poll
//     TestDuplicateDeliveryHappensOnce, TestStalePollDoesNothing,
//     TestEarlyPollIsPutBackAtItsTime, TestCallbackOfSucceededJobFetches
//     (the poll on its way finds the chain ended); functions/reconcile
//     TestScanReemitsTheLostPollOfTheLiveChain.
//   - Cancel vs completion: functions/poll TestCancelBeforeCompletionCancels,
//     TestCancelAfterCompletionKeepsTheOutput, TestCallbackAndCancelRace,
//     TestCancelUnansweredReconciles; functions/reconcile
//     TestCancelLookFindsTheJobStopped, TestCancelLookFindsTheJobFinishedFirst,
//     TestCancelLookStillRunningAsksAgain,
//     TestCancelLookUnknownTooLongNeedsAttention.
//   - FIFO poison: adapter/source TestPoisonDoesNotBlockAFIFOGroup,
//     TestFIFOGroupsStayInOrderWithManyWorkers; adapter/relay
//     TestFIFOGroupWaitsForItsHead.
//   - Poison retry storm: TestAnomalyPoisonRetryStorm,
//     TestRealBrokerPoisonRetryStorm; adapter/source
//     TestFailingEveryTimeEndsInDeadLetters; adapter/dlq TestRealBrokerDLQDrain.
//   - Consumer rebalance: TestAnomalyConsumerRebalance,
//     TestRealBrokerConsumerRebalance.
//   - Replaying an old command from the DLQ: shared/replay
//     TestSubmitForRunningTaskIsStaleNoop, TestSettleReplayedTwiceChargesOnce,
//     TestRefusalsAreAuditedAndFinal,
//     TestBulkDryRunCountsThenApprovesAndExecutesOnce; adapter
//     TestReplayCommandsEndToEnd.
//   - Schema upgrade with old and new consumers side by side:
//     TestAnomalySchemaUpgradeOldAndNewConsumersSideBySide; adapter/e2e
//     TestRealBrokerExactlyOnceUnderFaults (a schema 99 event quarantined).
//   - Provider accepted and we timed out: functions/submit
//     TestLostAnswerReconcilesInsteadOfResubmitting; functions/reconcile
//     TestJobFoundRunsTheTask, TestConfirmedAbsentResubmitsTheSameAttempt,
//     TestUnansweredLookupsNeedAttention; local TestJourneyOnEmulator and
//     TestRealBrokerJourney (the provider simulator drops 8% of its answers
//     and no idempotency key gets two jobs).
//   - Duplicate settlement: functions/settle TestSucceededIsCapturedOnce,
//     TestTheTaskNotTheMessageDecides; shared/replay
//     TestSettleReplayedTwiceChargesOnce.
//
// # Running
//
//	go test -race ./adapter/e2e/...                   # the emulator tests
//	go test -run '^TestRealBroker' ./adapter/e2e/...  # the real proxy, without -race
package anomaly
