const t0 = performance.now();
const m = await import('yargs');
const t1 = performance.now();
const y = m.default(['verify','x.json','--cache','d']).command('verify <plan>', 'v', (yy) => yy.option('cache', {type:'string'})).strict().help(false).version(false);
const a = await y.parse();
const t2 = performance.now();
console.log({ import: t1-t0, parse: t2-t1 });
