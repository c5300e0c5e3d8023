/**
 * The literal unions of api.ts against the server's lists in src/vocabulary.json. Each union is
 * spelled out as an object with one key per member: the compiler (ts-jest type-checks) refuses
 * a missing or an extra member, and the test compares the keys with the server's list.
 */
import { HolderKind, UsageSource } from '../store/api';
import vocabulary from '../vocabulary.json';

const HOLDER_KINDS: { [kind in HolderKind]: true } = {
  kernel: true,
  command: true
};

const USAGE_SOURCES: { [source in UsageSource]: true } = {
  measured: true,
  reported: true,
  none: true
};

describe('api.ts and the server', () => {
  it('name the same holder kinds', () => {
    expect(Object.keys(HOLDER_KINDS)).toEqual(vocabulary.holder_kinds);
  });

  it("have words for another user's holder of every kind", () => {
    expect(Object.keys(vocabulary.hidden_holder).sort()).toEqual(
      Object.keys(HOLDER_KINDS).sort()
    );
  });

  it('name the same usage sources', () => {
    expect(Object.keys(USAGE_SOURCES)).toEqual(vocabulary.usage_sources);
  });
});
