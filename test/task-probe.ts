/**
 * A stand-in for stages/engines/worker.ts in pool tests: instead of proving, it reports what a task
 * carries (the type of its plan field, whether raw text came along, the plan's size).
 */
import type { StageResult } from '../stages/decompose/prove.js';

export default function probe(task: Record<string, unknown>): Pick<StageResult, 'status' | 'reason' | 'failingRanks' | 'logicalOps' | 'parallelOps' | 'terms' | 'ms'> {
  const plan = task['plan'];
  const seen = {
    planType: Object.prototype.toString.call(plan),
    hasText: 'text' in task,
    bytes: plan instanceof SharedArrayBuffer ? plan.byteLength : -1,
    head: plan instanceof SharedArrayBuffer ? Buffer.from(plan).toString('utf8', 0, 16) : '',
    limits: task['limits'],
  };
  return { status: 'unknown', reason: JSON.stringify(seen), failingRanks: [], logicalOps: 0, parallelOps: 0, terms: 0, ms: 0 };
}
