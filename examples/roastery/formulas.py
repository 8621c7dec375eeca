# Python formulas for the roastery sample's py_calc node. Plexus loads this file once per worker
# and calls the functions named in the script's calculated_fields.
import datetime


def revenue(total_kg, price_per_kg):
    return float(total_kg) * float(price_per_kg)


def popularity(order_count):
    if order_count >= 20:
        return "hot"
    if order_count >= 8:
        return "steady"
    return "slow"


def days_on_shelf(harvested):
    # Datetimes arrive as "2006-01-02T15:04:05.000-07:00" strings.
    start = datetime.datetime.fromisoformat(harvested)
    end = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
    return (end - start).days
