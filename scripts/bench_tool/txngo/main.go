// txngo: the franz-go driver of `scripts/bench --txn --client go`.
//
// txn.py creates the topic, starts this program for one run against one
// target, and afterwards checks the topic with its own read_committed
// consumer. This program runs the same workload as txn.py's Python workers:
// N producers, each its own kgo.Client with its own transactional ID (acks=all,
// idempotent), each looping
//
//	BeginTransaction
//	Produce R records, record j of transaction n of producer i to partition
//	        (i + n + j) mod P (manual partitioner)
//	Flush                          // every record acknowledged
//	EndTransaction(ctx, TryCommit) // the EndTxn round trip alone
//
// until told to stop. Once every producer has committed one transaction, it
// waits -warmup seconds, then measures for -duration seconds; only
// transactions begun and committed inside that window count.
//
// Stdout is line-oriented JSON, read by txn.py:
//
//	{"event":"ready", ...}    every producer has its producer ID
//	{"event":"measure"}       the measured window starts now
//	{"event":"stop"}          the measured window ends now
//	{"event":"result", ...}   the raw figures (latencies in ms, sorted)
//
// txn.py samples the broker's CPU when it reads "measure" and "stop"; this
// program measures its own CPU (getrusage) at the same two moments. Logs and
// errors go to stderr. The exit status is 0 whenever a result line was
// printed (txn.py judges aborted / failed counts), 1 on a setup error.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Every blocking call of the loop gets this long: as txn.py's 60 s timeouts
// of flush() and commit_transaction(), so a stuck broker fails the run
// instead of hanging it.
const opTimeout = 60 * time.Second

// How long the program waits for the producers to initialise, for each of
// them to commit a first transaction, and for them to finish after "stop".
const phaseTimeout = 120 * time.Second

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

type config struct {
	bootstrap      string
	topic          string
	txnPrefix      string
	producers      int
	records        int
	partitions     int
	size           int
	warmup         time.Duration
	duration       time.Duration
	retryBackoffMs int
	debug          bool
	tv1            bool
}

// requestCounter counts the requests written to any broker, by API key, over
// all producers: the franz-go counterpart of librdkafka's per-broker "req"
// statistics that txn.py sums.
type requestCounter struct {
	n [256]atomic.Int64
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key >= 0 && int(key) < len(c.n) {
		c.n[key].Add(1)
	}
}

func (c *requestCounter) byName() map[string]int64 {
	out := map[string]int64{}
	for k := range c.n {
		if v := c.n[k].Load(); v > 0 {
			name := kmsg.NameForKey(int16(k))
			if name == "" {
				name = fmt.Sprintf("key%d", k)
			}
			out[name] = v
		}
	}
	return out
}

type worker struct {
	idx     int
	cfg     *config
	cl      *kgo.Client
	phase   *atomic.Int32
	payload []byte

	committedTotal atomic.Int64 // warm-up included: what the consumer must see
	done           atomic.Bool

	// Written by the worker's goroutine only, read after it is done.
	committed int64 // begun and committed inside the measured window
	aborted   int64
	failed    int64
	errs      []string
	flushLat  []float64
	commitLat []float64
	txnLat    []float64
}

func (w *worker) addErr(format string, args ...any) {
	// A few are enough to say what went wrong; a broken run can fail
	// thousands of times.
	if len(w.errs) < 20 {
		w.errs = append(w.errs, fmt.Sprintf(format, args...))
	}
}

// txn runs one transaction; it returns the produce (begin to flushed) and
// EndTxn durations, or the error that made it fail.
func (w *worker) txn(seq int) (time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
	)
	t0 := time.Now()
	if err := w.cl.BeginTransaction(); err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	first := (w.idx + seq) % w.cfg.partitions
	for j := 0; j < w.cfg.records; j++ {
		r := &kgo.Record{
			Topic:     w.cfg.topic,
			Key:       fmt.Appendf(nil, "%d-%d-%d", w.idx, seq, j),
			Value:     w.payload,
			Partition: int32((first + j) % w.cfg.partitions),
		}
		w.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	// Flush returns once every buffered record's promise has run.
	if err := w.cl.Flush(ctx); err != nil {
		return 0, 0, fmt.Errorf("flush: %w", err)
	}
	mu.Lock()
	perr := firstErr
	mu.Unlock()
	if perr != nil {
		return 0, 0, fmt.Errorf("produce: %w", perr)
	}
	t1 := time.Now()
	if err := w.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	t2 := time.Now()
	return t1.Sub(t0), t2.Sub(t1), nil
}

// abort ends a failed transaction: drop what is still buffered, then EndTxn
// with abort.
func (w *worker) abort() error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := w.cl.AbortBufferedRecords(ctx); err != nil {
		return err
	}
	return w.cl.EndTransaction(ctx, kgo.TryAbort)
}

func (w *worker) run(start <-chan struct{}) {
	defer w.done.Store(true)
	<-start
	// The loop ends when main sets phaseStop (after warm-up + duration, both
	// bounded) or when an abort fails; each iteration is bounded by opTimeout.
	for seq := 0; w.phase.Load() != phaseStop; seq++ {
		inWindow := w.phase.Load() == phaseMeasure
		flush, commit, err := w.txn(seq)
		if err != nil {
			w.addErr("producer %d: %v", w.idx, err)
			if aerr := w.abort(); aerr != nil {
				w.failed++
				w.addErr("producer %d: abort: %v", w.idx, aerr)
				return
			}
			w.aborted++
			continue
		}
		w.committedTotal.Add(1)
		if inWindow && w.phase.Load() == phaseMeasure {
			w.committed++
			w.flushLat = append(w.flushLat, ms(flush))
			w.commitLat = append(w.commitLat, ms(commit))
			w.txnLat = append(w.txnLat, ms(flush+commit))
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func emit(v any) {
	out, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "txngo: encoding output: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "txngo: "+format+"\n", args...)
	os.Exit(1)
}

func clientOpts(cfg *config, idx int, hook *requestCounter) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.bootstrap),
		kgo.ClientID(fmt.Sprintf("kaas-bench-txngo-%d", idx)),
		kgo.TransactionalID(fmt.Sprintf("%s-%d", cfg.txnPrefix, idx)),
		// txn.py's transaction.timeout.ms (franz-go's default is 40 s).
		kgo.TransactionTimeout(60 * time.Second),
		// franz-go's defaults already; stated because the workload needs them.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// franz-go lingers 10 ms by default; librdkafka in txn.py runs with
		// linger.ms=0. Flush cuts a linger short anyway, but records would
		// otherwise wait until the flush instead of leaving at once.
		kgo.ProducerLinger(0),
		// franz-go compresses with snappy by default, librdkafka sends
		// uncompressed by default: the same bytes on the wire, and no
		// compression CPU that the Python client does not spend either.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.WithHooks(hook),
	}
	if cfg.retryBackoffMs >= 0 {
		backoff := time.Duration(cfg.retryBackoffMs) * time.Millisecond
		opts = append(opts, kgo.RetryBackoffFn(func(int) time.Duration { return backoff }))
	}
	if cfg.tv1 {
		// Capping Produce below v12 (and EndTxn / TxnOffsetCommit below v5)
		// makes franz-go stay on transaction version 1 (AddPartitionsToTxn
		// before the first produce to a partition), like librdkafka, even
		// when the broker finalizes transaction.version 2.
		v := kversion.Stable()
		v.SetMaxKeyVersion(int16(kmsg.Produce), 11)
		v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
		v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
		opts = append(opts, kgo.MaxVersions(v))
	}
	level := kgo.LogLevelWarn
	if cfg.debug {
		level = kgo.LogLevelDebug
	}
	prefix := fmt.Sprintf("[producer %d] ", idx)
	opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, func() string { return prefix })))
	return opts
}

func parseFlags() *config {
	cfg := &config{}
	var warmup, duration float64
	flag.StringVar(&cfg.bootstrap, "bootstrap", "", "broker address host:port (required)")
	flag.StringVar(&cfg.topic, "topic", "", "existing topic to produce to (required)")
	flag.StringVar(&cfg.txnPrefix, "txn-prefix", "", "transactional IDs are <prefix>-<producer> (required)")
	flag.IntVar(&cfg.producers, "producers", 32, "concurrent transactional producers")
	flag.IntVar(&cfg.records, "records", 10, "records per transaction")
	flag.IntVar(&cfg.partitions, "partitions", 8, "partitions of the topic")
	flag.IntVar(&cfg.size, "size", 100, "record value size in bytes")
	flag.Float64Var(&warmup, "warmup", 3, "seconds of transactions before measuring")
	flag.Float64Var(&duration, "duration", 20, "measured seconds")
	flag.IntVar(&cfg.retryBackoffMs, "retry-backoff-ms", -1, "constant retry backoff in ms (default: franz-go's, 250 ms doubling to 5 s)")
	flag.BoolVar(&cfg.debug, "debug", false, "franz-go's debug log on stderr")
	flag.BoolVar(&cfg.tv1, "tv1", false, "stay on transaction version 1 (AddPartitionsToTxn) even if the broker offers 2")
	flag.Parse()
	if cfg.bootstrap == "" || cfg.topic == "" || cfg.txnPrefix == "" {
		die("-bootstrap, -topic and -txn-prefix are required")
	}
	if cfg.producers < 1 || cfg.records < 1 || cfg.partitions < 1 || cfg.size < 0 {
		die("-producers, -records and -partitions must be at least 1, -size not negative")
	}
	if warmup < 0 || duration <= 0 || duration > 24*3600 || warmup > 24*3600 {
		die("-warmup must be 0 or more and -duration above 0 (both under a day)")
	}
	cfg.warmup = time.Duration(warmup * float64(time.Second))
	cfg.duration = time.Duration(duration * float64(time.Second))
	return cfg
}

// waitAll waits until cond holds or the timeout passes; it polls because the
// workers publish their progress through atomics.
func waitAll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func main() {
	cfg := parseFlags()
	hook := &requestCounter{}
	var phase atomic.Int32
	payload := make([]byte, cfg.size)
	// Random bytes, as txn.py's os.urandom payload.
	if _, err := rand.Read(payload); err != nil {
		die("payload: %v", err)
	}

	// Create the clients and load every producer ID up front, as
	// init_transactions() does in txn.py: InitProducerID is not part of the
	// measured window.
	tInit := time.Now()
	workers := make([]*worker, cfg.producers)
	var initWG sync.WaitGroup
	initErrs := make([]error, cfg.producers)
	for i := range workers {
		cl, err := kgo.NewClient(clientOpts(cfg, i, hook)...)
		if err != nil {
			die("producer %d: client: %v", i, err)
		}
		workers[i] = &worker{idx: i, cfg: cfg, cl: cl, phase: &phase, payload: payload}
		initWG.Add(1)
		go func(i int) {
			defer initWG.Done()
			ctx, cancel := context.WithTimeout(context.Background(), phaseTimeout)
			defer cancel()
			_, _, initErrs[i] = workers[i].cl.ProducerID(ctx)
		}(i)
	}
	initWG.Wait()
	initSecs := time.Since(tInit).Seconds()
	start := make(chan struct{})
	var running sync.WaitGroup
	for i, w := range workers {
		if initErrs[i] != nil {
			// As txn.py: a producer that cannot initialise counts as failed
			// and takes no part in the run.
			w.failed++
			w.addErr("producer %d: init: %v", i, initErrs[i])
			w.done.Store(true)
			continue
		}
		running.Add(1)
		go func(w *worker) {
			defer running.Done()
			w.run(start)
		}(w)
	}
	emit(map[string]any{"event": "ready", "init_secs": initSecs})
	close(start)

	// The warm-up starts once every producer has committed a transaction
	// (a Kafka coordinator loads __transaction_state on first use).
	waitAll(phaseTimeout, func() bool {
		for _, w := range workers {
			if w.committedTotal.Load() == 0 && !w.done.Load() {
				return false
			}
		}
		return true
	})
	time.Sleep(cfg.warmup)
	cpu1 := selfCPU()
	t0 := time.Now()
	phase.Store(phaseMeasure)
	emit(map[string]any{"event": "measure"})
	time.Sleep(cfg.duration)
	phase.Store(phaseStop)
	secs := time.Since(t0).Seconds()
	cpu2 := selfCPU()
	emit(map[string]any{"event": "stop"})

	finished := make(chan struct{})
	go func() { running.Wait(); close(finished) }()
	stuck := 0
	select {
	case <-finished:
	case <-time.After(phaseTimeout):
		for _, w := range workers {
			if !w.done.Load() {
				stuck++
			}
		}
	}

	res := map[string]any{"event": "result", "secs": secs, "init_secs": initSecs,
		"cpu_client": (cpu2 - cpu1) / secs}
	var committed, committedTotal, aborted, failed int64
	var commitLat, flushLat, txnLat []float64
	errs := []string{}
	for _, w := range workers {
		committedTotal += w.committedTotal.Load()
		if !w.done.Load() {
			// Its fields may still change: report it as failed, read nothing else.
			continue
		}
		committed += w.committed
		aborted += w.aborted
		failed += w.failed
		errs = append(errs, w.errs...)
		commitLat = append(commitLat, w.commitLat...)
		flushLat = append(flushLat, w.flushLat...)
		txnLat = append(txnLat, w.txnLat...)
	}
	if stuck > 0 {
		failed += int64(stuck)
		errs = append(errs, fmt.Sprintf("%d producer(s) still in a transaction %s after the window", stuck, phaseTimeout))
	} else {
		// Close after every loop ended: no transaction is open, so Close
		// has nothing to abort. A stuck producer's client stays open; the
		// process exits right after.
		for _, w := range workers {
			w.cl.Close()
		}
	}
	sort.Float64s(commitLat)
	sort.Float64s(flushLat)
	sort.Float64s(txnLat)
	res["committed"] = committed
	res["committed_total"] = committedTotal
	res["aborted"] = aborted
	res["failed"] = failed
	res["errors"] = errs
	res["commit"] = commitLat
	res["flush"] = flushLat
	res["txn"] = txnLat
	res["requests"] = hook.byName()
	emit(res)
}
