// kafkajs against kaas: create a topic, produce with an idempotent producer,
// consume everything back in a consumer group, and check it byte for byte.
// Usage: node roundtrip.js <bootstrap> <topic> <messages>
// Prints one JSON line with what happened; exits non-zero on any mismatch.
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, countArg] = process.argv.slice(2);
const count = Number(countArg || 3000);
const partitions = 3;

function fail(msg) {
  console.error('FAIL: ' + msg);
  process.exit(1);
}

async function main() {
  const kafka = new Kafka({ clientId: 'kaas-e2e', brokers: [bootstrap], logLevel: logLevel.WARN,
    retry: { retries: 8 } });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true });

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const sent = [];
  for (let i = 0; i < count; i += 100) {
    const messages = [];
    for (let j = i; j < Math.min(i + 100, count); j++) {
      const m = { key: 'key-' + (j % 50), value: Buffer.from('value-' + j + '-' + 'x'.repeat(j % 37)),
        headers: { seq: String(j), h: Buffer.from([j % 256, 0, 255]) }, partition: j % partitions };
      messages.push(m);
      sent.push(m);
    }
    await producer.send({ topic, acks: -1, messages });
  }
  await producer.disconnect();

  const offsets = await admin.fetchTopicOffsets(topic);
  const total = offsets.reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  if (total !== count) fail(`high watermarks sum to ${total}, expected ${count}`);

  const consumer = kafka.consumer({ groupId: topic + '-group', sessionTimeout: 10000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = new Map();
  const lastOffset = new Map();
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out with ${got.size}/${count} messages`)), 60000);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const seq = Number(message.headers.seq.toString());
        const prev = lastOffset.get(partition);
        if (prev !== undefined && Number(message.offset) !== prev + 1) {
          reject(new Error(`partition ${partition}: offset ${message.offset} after ${prev}`));
        }
        lastOffset.set(partition, Number(message.offset));
        if (got.has(seq)) reject(new Error(`seq ${seq} delivered twice`));
        got.set(seq, { partition, message });
        if (got.size === count) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();

  for (let j = 0; j < count; j++) {
    const want = sent[j];
    const { partition, message } = got.get(j);
    if (partition !== want.partition) fail(`seq ${j}: partition ${partition}, expected ${want.partition}`);
    if (message.key.toString() !== want.key) fail(`seq ${j}: key differs`);
    if (!message.value.equals(want.value)) fail(`seq ${j}: value differs`);
    if (!message.headers.h.equals(want.headers.h)) fail(`seq ${j}: header differs`);
  }
  const committed = await admin.fetchOffsets({ groupId: topic + '-group', topics: [topic] });
  const committedTotal = committed[0].partitions.reduce((n, p) => n + Number(p.offset), 0);
  await admin.disconnect();
  console.log(JSON.stringify({ produced: count, consumed: got.size, committed: committedTotal }));
}

main().catch((e) => fail(e.stack || String(e)));
