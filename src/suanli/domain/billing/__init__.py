"""Billing core: price book, double-entry ledger, meter; pure, integer micros, time as epoch seconds.

Conventions for the whole package:

* Money is `int` micro-units of one currency (`*_micros`); prices are micros per GPU-hour or per hour.
* Time is an `int` of UTC epoch seconds (`*_s`); nothing here reads a clock. `to_epoch_s` converts an aware
  datetime.
* One rounding rule for every amount derived by multiplication: round half up of the exact rational value
  (`round_half_up(numerator, denominator)`), applied once to a cumulative figure, never to increments.
"""
