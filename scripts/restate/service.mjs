// The no-op task as a Restate service: one invocation, one journaled step
// (`ctx.run`), its result returned. Listens on $PORT (HTTP/2, as Restate's
// server calls it).
//
// The SDK calls `Promise.withResolvers` (Node.js 22); Debian's Node.js is
// 20, so it is given here, as the standard defines it, before the SDK
// loads.
Promise.withResolvers ??= function () {
  let resolve, reject;
  const promise = new Promise((yes, no) => {
    resolve = yes;
    reject = no;
  });
  return { promise, resolve, reject };
};
const restate = await import("@restatedev/restate-sdk");

const bench = restate.service({
  name: "bench",
  handlers: {
    task: async (ctx, input) => {
      return await ctx.run("step", async () => ({ echoed: input ?? null }));
    },
  },
});

restate.endpoint().bind(bench).listen(Number(process.env.PORT));
