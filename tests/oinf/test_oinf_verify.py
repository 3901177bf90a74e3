def test_stats_of_huge_finite_values_do_not_overflow():
    import warnings

    import numpy as np

    from tenfold.oinf._verify import tensor_stats

    big = np.array([1.7e308, 1.7e308, -1.7e308, 1e308], dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = tensor_stats(big)
    assert s["max"] == 1.7e308 and s["min"] == -1.7e308
    assert s["mean"] is not None and abs(s["mean"] - 6.75e307) < 1e294
    assert s["std"] is None and s["overflow"] is True
    assert tensor_stats(np.arange(5.0))["std"] == np.arange(5.0).std()
