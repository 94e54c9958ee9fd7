/**
 * The pool's worker entry, in CommonJS. Piscina loads a worker file with require() first; on
 * Node 20.19+ require() of an ES module (stages/engines/worker.js) runs the module graph
 * synchronously, and a worker stopped at its deadline while that runs can abort the whole
 * process ("v8::Module::IsGraphAsync must be used on an instantiated module", a V8 fatal
 * error: seen with `verify --deadline 0.2`). This file is plain CommonJS, so require() never
 * takes that path; the proof module is loaded by import(), which a stopped worker abandons
 * safely.
 */
import type { StageTask } from './worker.js' with { 'resolution-mode': 'import' };
import type { StageResult } from '../decompose/prove.js' with { 'resolution-mode': 'import' };

module.exports = async function proveStage(task: StageTask): Promise<StageResult> {
  const m = await import('./worker.js');
  return m.default(task);
};
