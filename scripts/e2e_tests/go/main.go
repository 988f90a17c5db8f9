// franz-go against kaas: create a 3-partition topic with kadm, produce N
// records with franz-go's (default) idempotent producer and acks=all, consume
// them back in a consumer group that commits its offsets, and read the
// committed offsets back with kadm.
//
// Usage: franzgo <bootstrap> <topic> <records>
// Prints one JSON line {"produced","consumed","committed","duplicates","end_offsets",
// "producer_id","partitions"};
// exits non-zero on any error or mismatch (the JSON line is still printed when
// the run got far enough to have one).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const partitions = 3

type result struct {
	Produced   int   `json:"produced"`
	Consumed   int   `json:"consumed"`
	Committed  int64 `json:"committed"`
	Duplicates int   `json:"duplicates"`
	EndOffsets int64 `json:"end_offsets"` // sum of the partitions' high watermarks
	ProducerID int64 `json:"producer_id"`
	Partitions int   `json:"partitions"`
}

var res result

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	os.Exit(1)
}

func opts(bootstrap string, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...), // one address, or a comma-separated list
		kgo.ClientID("kaas-e2e-franz-go"),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, nil)),
		kgo.RetryTimeout(20 * time.Second),
	}, extra...)
}

// where a produced record landed, by its sequence number
type placed struct {
	partition int32
	offset    int64
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: franzgo <bootstrap> <topic> <records>")
		os.Exit(2)
	}
	bootstrap, topic := os.Args[1], os.Args[2]
	n, err := strconv.Atoi(os.Args[3])
	if err != nil || n <= 0 {
		fail("bad record count %q", os.Args[3])
	}
	group := topic + "-group"

	// --- admin: create the topic -------------------------------------------
	admCl, err := kgo.NewClient(opts(bootstrap)...)
	if err != nil {
		fail("admin client: %v", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	created, err := adm.CreateTopics(ctx, partitions, 1, nil, topic)
	cancel()
	if err != nil {
		fail("create topic: %v", err)
	}
	if err := created.Error(); err != nil {
		fail("create topic: %v", err)
	}

	// --- produce: idempotent (franz-go's default), acks=all ----------------
	prod, err := kgo.NewClient(opts(bootstrap,
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)...)
	if err != nil {
		fail("producer client: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	var (
		mu     sync.Mutex
		where  = make([]placed, n)
		errs   []error
		wg     sync.WaitGroup
		onDone = func(seq int) func(*kgo.Record, error) {
			return func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("record %d: %w", seq, err))
					return
				}
				where[seq] = placed{r.Partition, r.Offset}
				res.Produced++
			}
		}
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		prod.Produce(ctx, &kgo.Record{
			Key:   []byte(fmt.Sprintf("key-%d", i)),
			Value: []byte(fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i%37))),
		}, onDone(i))
	}
	if err := prod.Flush(ctx); err != nil {
		fail("flush: %v", err)
	}
	wg.Wait()
	if len(errs) > 0 {
		fail("%d produce errors, first: %v", len(errs), errs[0])
	}
	// The idempotent producer must have been given a producer id by the broker.
	pid, _, err := prod.ProducerID(ctx)
	cancel()
	if err != nil {
		fail("producer id: %v", err)
	}
	res.ProducerID = pid
	prod.Close()
	if pid < 0 {
		fail("producer id %d: the producer is not idempotent", pid)
	}
	used := map[int32]bool{}
	for _, w := range where {
		used[w.partition] = true
	}
	res.Partitions = len(used)

	// --- consume in a group, committing after every poll -------------------
	cons, err := kgo.NewClient(opts(bootstrap,
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(10*time.Second),
	)...)
	if err != nil {
		fail("consumer client: %v", err)
	}
	seen := make([]int, n)
	lastOffset := map[int32]int64{}
	lastSeq := map[int32]int{}
	consume := func(ctx context.Context) {
		fetches := cons.PollFetches(ctx)
		if ctx.Err() == nil {
			fetches.EachError(func(t string, p int32, err error) {
				fail("fetch %s/%d: %v", t, p, err)
			})
		}
		fetches.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			var seq int
			if _, err := fmt.Sscanf(v, "value-%d-", &seq); err != nil || seq < 0 || seq >= n {
				fail("unexpected value %q", v)
			}
			want := fmt.Sprintf("value-%d-%s", seq, strings.Repeat("x", seq%37))
			if v != want || string(r.Key) != fmt.Sprintf("key-%d", seq) {
				fail("record %d: key %q value %q", seq, r.Key, v)
			}
			if seen[seq]++; seen[seq] > 1 {
				res.Duplicates++ // redelivered, or written twice: counted, not order-checked
				return
			}
			res.Consumed++
			if w := where[seq]; w.partition != r.Partition || w.offset != r.Offset {
				fail("record %d consumed at %d/%d, produced at %d/%d",
					seq, r.Partition, r.Offset, w.partition, w.offset)
			}
			if prev, ok := lastOffset[r.Partition]; ok && r.Offset != prev+1 {
				fail("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			if prev, ok := lastSeq[r.Partition]; ok && seq <= prev {
				fail("partition %d: record %d after record %d (produce order lost)", r.Partition, seq, prev)
			}
			lastOffset[r.Partition], lastSeq[r.Partition] = r.Offset, seq
		})
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := cons.CommitUncommittedOffsets(cctx); err != nil {
			fail("commit: %v", err)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 40*time.Second)
	for res.Consumed < n && ctx.Err() == nil {
		consume(ctx)
	}
	cancel()
	if res.Consumed < n {
		fail("timed out with %d/%d records consumed", res.Consumed, n)
	}
	// Poll a little longer: anything arriving now is a duplicate.
	ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	for ctx.Err() == nil {
		consume(ctx)
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	if err := cons.LeaveGroupContext(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fail("leave group: %v", err)
	}
	cancel()
	cons.Close()

	// --- committed offsets, read back with kadm ----------------------------
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
	offs, err := adm.FetchOffsets(ctx, group)
	cancel()
	if err != nil {
		fail("fetch offsets: %v", err)
	}
	if err := offs.Error(); err != nil {
		fail("fetch offsets: %v", err)
	}
	for p, o := range offs[topic] {
		if last, ok := lastOffset[p]; !ok || o.At != last+1 {
			fail("partition %d: committed %d, last consumed offset %d", p, o.At, lastOffset[p])
		}
		res.Committed += o.At
	}
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
	ends, err := adm.ListEndOffsets(ctx, topic)
	cancel()
	if err != nil {
		fail("list end offsets: %v", err)
	}
	if err := ends.Error(); err != nil {
		fail("list end offsets: %v", err)
	}
	ends.Each(func(o kadm.ListedOffset) { res.EndOffsets += o.Offset })

	if res.Produced != n || res.Consumed != n || res.Committed != int64(n) || res.Duplicates != 0 || res.EndOffsets != int64(n) {
		fail("counts differ from the %d records produced", n)
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}
