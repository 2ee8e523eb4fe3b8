"""Looking at a bag: plots of decoded fields, a timeline of the index, notebook (HTML) views.

- :mod:`.fields`: a field path (``"linear_acceleration.x"``, ``"ranges[0]"``,
  ``"transforms[0].transform.translation.x"``) to one number per message;
- :mod:`.timeline`: per topic, from the index alone, the receive times, rate,
  density bins and gaps (no message is decoded, so undecodable topics show);
- :mod:`.plot`: matplotlib figures of both (``fastbag plot``, ``fastbag timeline``,
  ``TopicArray.plot``, ``Bag.plot_timeline``); matplotlib is the optional extra
  ``fastbag[plot]``, imported on first use;
- :mod:`.html`: ``_repr_html_`` of a Bag, a TopicArray and a decoded message
  (plain HTML and inline SVG: no matplotlib needed).
"""
