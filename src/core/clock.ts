/** Milliseconds since the epoch. Injected everywhere a decision depends on time. */
export type Clock = () => number;

export const systemClock: Clock = () => Date.now();

/** A clock tests can move by hand. */
export const fakeClock = (start = Date.UTC(2026, 10, 22, 12)) => {
  let now = start;
  const clock: Clock & { advance(ms: number): void; set(ms: number): void } = Object.assign(() => now, {
    advance(ms: number) {
      now += ms;
    },
    set(ms: number) {
      now = ms;
    },
  });
  return clock;
};
